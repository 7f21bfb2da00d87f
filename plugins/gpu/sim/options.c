/* The simulated runtime's one state (rt) with its defaults (2 devices of 256 MiB, jitter_us 50,
 * seed 1), the runtime-wide settings that [plugin sim] sets (simConfigure), the counters of
 * devmm_sim_stats, and the test entry's calls "on device d". */
#include "simrt_internal.h"

struct sim_runtime rt = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .progress = PTHREAD_COND_INITIALIZER,
    .ndevices = 2,
    .memory = (size_t)256 << 20,
    .jitter_us = 50,
    .seed = 1,
};

__thread int tls_device;
__thread int tls_bound;
__thread int tls_kernel_device = -1;

/* ------------------------------------------------------------------ configuration, stats */

static int anything_live(void) {
  if (rt.streams_live || rt.frees_pending || rt.nregions)
    return 1;
  for (int d = 0; d < SIM_MAX_DEVICES; d++)
    for (size_t i = 0; rt.devs[d].ready && i < rt.devs[d].nblocks; i++)
      if (rt.devs[d].blocks[i].state == B_LIVE || rt.devs[d].blocks[i].state == B_FREEING)
        return 1;
  return 0;
}

simError_t simConfigure(int devices, size_t memory, unsigned jitter_us, uint64_t seed) {
  if (sim__forked()) /* the plugin's configuration: no initialisation, but the fork rule */
    return simErrorInitializationError;
  if (devices < 0 || devices > SIM_MAX_DEVICES || memory < SIM_ALIGN)
    return simErrorInvalidValue;
  memory = (memory + 4095) / 4096 * 4096;
  pthread_mutex_lock(&rt.lock);
  simError_t e = simSuccess;
  if (devices != rt.ndevices || memory != rt.memory) {
    if (anything_live()) {
      e = simErrorNotReady;
    } else {
      for (int d = 0; d < SIM_MAX_DEVICES; d++)
        sim__device_teardown(d);
      rt.ndevices = devices;
      rt.memory = memory;
    }
  }
  if (!e) {
    rt.jitter_us = jitter_us;
    rt.seed = seed;
    rt.epoch++; /* streams re-seed their generators */
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

void sim__stats(uint64_t *streams_created, uint64_t *streams_live, uint64_t *events_created,
                uint64_t *events_live, uint64_t *allocations, uint64_t *bytes,
                uint64_t *frees_pending) {
  pthread_mutex_lock(&rt.lock);
  *streams_created = rt.streams_created;
  *streams_live = rt.streams_live;
  *events_created = rt.events_created;
  *events_live = rt.events_live;
  *frees_pending = rt.frees_pending;
  uint64_t n = rt.nregions, b = 0;
  for (size_t i = 0; i < rt.nregions; i++)
    b += rt.regions[i].size;
  for (int d = 0; d < SIM_MAX_DEVICES; d++)
    for (size_t i = 0; rt.devs[d].ready && i < rt.devs[d].nblocks; i++)
      if (rt.devs[d].blocks[i].state == B_LIVE || rt.devs[d].blocks[i].state == B_FREEING) {
        n++;
        b += rt.devs[d].blocks[i].size;
      }
  *allocations = n;
  *bytes = b;
  pthread_mutex_unlock(&rt.lock);
}

/* For the test entry's "on device d" calls: makes d the calling thread's device (*prev: the
 * one to restore), or says why not. */
static simError_t use_device(int d, int *prev) {
  *prev = tls_device;
  if (sim__enter()) /* the fork rule, before the lock a parent's thread may have held */
    return simErrorInitializationError;
  pthread_mutex_lock(&rt.lock);
  simError_t e = sim__valid_device(d) ? simSuccess : simErrorInvalidDevice;
  pthread_mutex_unlock(&rt.lock);
  *prev = tls_device;
  if (!e)
    tls_device = d;
  return e;
}

simError_t sim__device_synchronize(int d) {
  int prev;
  simError_t e = use_device(d, &prev);
  if (!e)
    e = simDeviceSynchronize();
  tls_device = prev;
  return e;
}

simError_t sim__stream_create(int d, unsigned flags, simStream_t *out) {
  int prev;
  simError_t e = use_device(d, &prev);
  if (!e)
    e = simStreamCreateWithFlags(out, flags);
  tls_device = prev;
  return e;
}

simError_t sim__event_create(int d, simEvent_t *out) {
  int prev;
  simError_t e = use_device(d, &prev);
  if (!e)
    e = simEventCreateWithFlags(out, simEventDisableTiming);
  tls_device = prev;
  return e;
}
