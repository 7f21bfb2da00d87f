/* devmm-sim's test entry points (include/devmm/sim.h), and the plugin-wide options ([plugin sim]
 * in devmm.ini) they share: streams, events and kernels over the simulated runtime, for C tests
 * and for Python through ctypes (devmm.mrs.sim). */
#include <devmm/plugin.h>
#include <devmm/sim.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "simrt_internal.h" /* sim__inject, sim__stats, the "on device d" calls */

static const devmm_host_services *host;

void sim_on_entry(const devmm_host_services *h) { host = h; }

const char *const sim_plugin_options[] = {"devices", "memory", "jitter_us", "seed", NULL};

static int parse_uint(const char *key, const char *v, unsigned long long max,
                      unsigned long long *out) {
  char *end;
  unsigned long long x = strtoull(v, &end, 10);
  if (end == v || *end || v[0] == '-' || x > max)
    return host->set_error(DEVMM_EINVAL, "%s = %s: expected an integer 0..%llu", key, v, max);
  *out = x;
  return DEVMM_OK;
}

/* Called at every load with the whole [plugin sim] section (absent keys take their defaults):
 * devices = 2, memory = 256MiB (per device), jitter_us = 50, seed = 1. */
int sim_configure(const devmm_option *o, size_t n) {
  unsigned long long devices = 2, jitter = 50, seed = 1;
  size_t memory = (size_t)256 << 20;
  for (size_t i = 0; i < n; i++) {
    int rc = DEVMM_OK;
    if (strcmp(o[i].key, "devices") == 0)
      rc = parse_uint("devices", o[i].value, 16, &devices);
    else if (strcmp(o[i].key, "jitter_us") == 0)
      rc = parse_uint("jitter_us", o[i].value, 1000000, &jitter);
    else if (strcmp(o[i].key, "seed") == 0)
      rc = parse_uint("seed", o[i].value, ~0ull, &seed);
    else if (strcmp(o[i].key, "memory") == 0 &&
             (rc = host->parse_size(o[i].value, 0, &memory)) == DEVMM_OK && memory < 4096)
      rc = host->set_error(DEVMM_EINVAL, "memory = %s: at least 4KiB per device", o[i].value);
    if (rc)
      return rc;
  }
  simError_t e = simConfigure((int)devices, memory, (unsigned)jitter, seed);
  if (e == simErrorNotReady)
    return host->set_error(DEVMM_ESTATE,
                           "devices = %llu, memory = %zu: the device count and memory cannot "
                           "change while sim memory or streams are live",
                           devices, memory);
  return e ? host->set_error(DEVMM_EINVAL, "%s", simGetErrorString(e)) : DEVMM_OK;
}

/* ------------------------------------------------------------------ test entry points */

static int status(simError_t e, const char *call) {
  if (e == simSuccess)
    return DEVMM_OK;
  return host->set_error(e == simErrorMemoryAllocation ? DEVMM_ENOMEM
                         : e == simErrorInvalidValue || e == simErrorInvalidDevice ||
                                 e == simErrorInvalidResourceHandle
                             ? DEVMM_EINVAL
                             : DEVMM_EDEVICE,
                         "sim%s failed: %s (%s)", call, simGetErrorString(e), simGetErrorName(e));
}

#define API DEVMM_PLUGIN_EXPORT

API int devmm_sim_set_device(int device) { return status(simSetDevice(device), "SetDevice"); }

API int devmm_sim_get_device(int *device) {
  if (!device)
    return host->set_error(DEVMM_EINVAL, "devmm_sim_get_device: device is NULL");
  return status(simGetDevice(device), "GetDevice");
}

API int devmm_sim_stream_create(int device, int nonblocking, void **stream) {
  if (!stream)
    return host->set_error(DEVMM_EINVAL, "devmm_sim_stream_create: stream is NULL");
  return status(sim__stream_create(device, nonblocking ? simStreamNonBlocking : simStreamDefault,
                                   (simStream_t *)stream),
                "StreamCreateWithFlags");
}

API int devmm_sim_stream_destroy(void *stream) {
  return status(simStreamDestroy(stream), "StreamDestroy");
}

API int devmm_sim_stream_synchronize(void *stream) {
  return status(simStreamSynchronize(stream), "StreamSynchronize");
}

API int devmm_sim_device_synchronize(int device) {
  return status(sim__device_synchronize(device), "DeviceSynchronize");
}

API int devmm_sim_event_create(int device, void **event) {
  if (!event)
    return host->set_error(DEVMM_EINVAL, "devmm_sim_event_create: event is NULL");
  return status(sim__event_create(device, (simEvent_t *)event), "EventCreateWithFlags");
}

API int devmm_sim_event_record(void *event, void *stream) {
  return status(simEventRecord(event, stream), "EventRecord");
}

API int devmm_sim_stream_wait_event(void *stream, void *event) {
  return status(simStreamWaitEvent(stream, event, 0), "StreamWaitEvent");
}

API int devmm_sim_event_synchronize(void *event) {
  return status(simEventSynchronize(event), "EventSynchronize");
}

API int devmm_sim_event_destroy(void *event) {
  return status(simEventDestroy(event), "EventDestroy");
}

API int devmm_sim_launch(void *stream, devmm_sim_kernel kernel, void *user) {
  return status(simLaunchHostFunc(stream, kernel, user), "LaunchHostFunc");
}

API void *devmm_sim_view(const void *ptr, size_t n) { return simDeviceView(ptr, n); }

typedef struct {
  void *ptr;
  size_t n;
  int byte;
  int *result;
} fill_args;

/* The test kernels touch device bytes with relaxed atomics, one byte at a time: two kernels on
 * unordered streams race on purpose (that is what a test of a missing wait shows), as threads
 * of a GPU would, and the race must stay a wrong byte, never undefined behaviour or a
 * ThreadSanitizer report. */
static void fill_kernel(void *user) {
  fill_args *a = user;
  unsigned char *v = simDeviceView(a->ptr, a->n);
  for (size_t i = 0; v && i < a->n; i++)
    __atomic_store_n(&v[i], (unsigned char)a->byte, __ATOMIC_RELAXED);
  free(a);
}

static void check_kernel(void *user) {
  fill_args *a = user;
  unsigned char *v = simDeviceView(a->ptr, a->n);
  int ok = v != NULL;
  for (size_t i = 0; ok && i < a->n; i++)
    ok = __atomic_load_n(&v[i], __ATOMIC_RELAXED) == (unsigned char)a->byte;
  __atomic_store_n(a->result, ok, __ATOMIC_RELEASE);
  free(a);
}

static int launch_builtin(void *stream, void (*k)(void *), void *ptr, int byte, size_t n,
                          int *result, const char *what) {
  fill_args *a = malloc(sizeof *a);
  if (!a)
    return host->set_error(DEVMM_ENOMEM, "%s: out of host memory", what);
  *a = (fill_args){ptr, n, byte, result};
  simError_t e = simLaunchHostFunc(stream, k, a);
  if (e)
    free(a);
  return status(e, "LaunchHostFunc");
}

API int devmm_sim_fill(void *stream, void *ptr, int byte, size_t n) {
  return launch_builtin(stream, fill_kernel, ptr, byte, n, NULL, "devmm_sim_fill");
}

API int devmm_sim_check(void *stream, const void *ptr, int byte, size_t n, int *result) {
  if (!result)
    return host->set_error(DEVMM_EINVAL, "devmm_sim_check: result is NULL");
  *result = -1;
  return launch_builtin(stream, check_kernel, (void *)ptr, byte, n, result, "devmm_sim_check");
}

API int devmm_sim_inject(const char *call, int skip, int error) {
  if (sim__inject(call, skip, error))
    return host->set_error(DEVMM_EINVAL, "devmm_sim_inject: at most 8 injections of names up "
                                         "to 39 characters");
  return DEVMM_OK;
}

API int devmm_sim_stats_get(devmm_sim_stats *out) {
  if (!out || out->struct_size < sizeof *out)
    return host->set_error(DEVMM_EINVAL, "devmm_sim_stats_get: out is NULL or its struct_size is "
                                         "not set");
  sim__stats(&out->streams_created, &out->streams_live, &out->events_created, &out->events_live,
             &out->allocations_live, &out->bytes_live, &out->frees_pending);
  return DEVMM_OK;
}

API int devmm_sim_default_pool_threshold(int device, uint64_t *out) {
  simMemPool_t pool;
  simError_t e = simDeviceGetDefaultMemPool(&pool, device);
  if (!e)
    e = simMemPoolGetAttribute(pool, simMemPoolAttrReleaseThreshold, out);
  return status(e, "MemPoolGetAttribute");
}
