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

const char *const sim_plugin_options[] = {"devices", "memory",          "jitter_us",
                                          "seed",    "pageable_access", NULL};

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
 * devices = 2, memory = 256MiB (per device), jitter_us = 50, seed = 1, pageable_access = false
 * (most machines: no HMM or ATS, so sim.system is refused). */
int sim_configure(const devmm_option *o, size_t n) {
  unsigned long long devices = 2, jitter = 50, seed = 1;
  size_t memory = (size_t)256 << 20;
  int pageable = 0;
  for (size_t i = 0; i < n; i++) {
    int rc = DEVMM_OK;
    if (strcmp(o[i].key, "pageable_access") == 0 && host->parse_bool(o[i].value, &pageable))
      return host->set_error(DEVMM_EINVAL, "pageable_access = %s: expected true or false",
                             o[i].value);
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
  if (e == simSuccess)
    simConfigurePageableAccess(pageable);
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
}

static void check_kernel(void *user) {
  fill_args *a = user;
  unsigned char *v = simDeviceView(a->ptr, a->n);
  int ok = v != NULL;
  for (size_t i = 0; ok && i < a->n; i++)
    ok = __atomic_load_n(&v[i], __ATOMIC_RELAXED) == (unsigned char)a->byte;
  __atomic_store_n(a->result, ok, __ATOMIC_RELEASE);
}

static int launch_builtin(void *stream, void (*k)(void *), void *ptr, int byte, size_t n,
                          int *result, const char *what) {
  fill_args *a = malloc(sizeof *a);
  if (!a)
    return host->set_error(DEVMM_ENOMEM, "%s: out of host memory", what);
  *a = (fill_args){ptr, n, byte, result};
  simError_t e = sim__enter(); /* the fork rule, as every runtime call */
  if (!e)
    e = simKernelArgument(stream, ptr, n); /* pageable memory: refused at launch */
  if (!e)
    e = sim__launch_owned(stream, k, a, free); /* a captured one: its graph's */
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

API int devmm_sim_peer_access(int device, int peer, int enable) {
  int prev = 0;
  simError_t e = simGetDevice(&prev);
  if (!e)
    e = simSetDevice(device);
  if (!e) {
    e = enable ? simDeviceEnablePeerAccess(peer, 0) : simDeviceDisablePeerAccess(peer);
    simSetDevice(prev);
  }
  return status(e, enable ? "DeviceEnablePeerAccess" : "DeviceDisablePeerAccess");
}

API int devmm_sim_pool_set_access(int device, int accessor, int flags) {
  simMemPool_t pool;
  simError_t e = simDeviceGetDefaultMemPool(&pool, device);
  simMemAccessDesc d = {{simMemLocationTypeDevice, accessor}, flags};
  if (!e)
    e = simMemPoolSetAccess(pool, &d, 1);
  return status(e, "MemPoolSetAccess");
}

API int devmm_sim_host_alloc(int device, size_t n, int portable, void **out) {
  if (!out)
    return host->set_error(DEVMM_EINVAL, "devmm_sim_host_alloc: out is NULL");
  int prev = 0;
  simError_t e = simGetDevice(&prev);
  if (!e)
    e = simSetDevice(device);
  if (!e) {
    e = simHostAlloc(out, n, portable ? simHostAllocPortable : simHostAllocDefault);
    simSetDevice(prev);
  }
  return status(e, "HostAlloc");
}

API int devmm_sim_free_host(void *p) { return status(simFreeHost(p), "FreeHost"); }

API int devmm_sim_ctx_create(int device, void **ctx) {
  return status(simCtxCreate((simCtx_t *)ctx, 0, device), "CtxCreate");
}

API int devmm_sim_ctx_current(void **ctx) {
  if (!ctx)
    return host->set_error(DEVMM_EINVAL, "devmm_sim_ctx_current: ctx is NULL");
  return status(simCtxGetCurrentHandle((simCtx_t *)ctx), "CtxGetCurrent");
}

API int devmm_sim_stats_get(devmm_sim_stats *out) {
  if (!out || out->struct_size < sizeof *out)
    return host->set_error(DEVMM_EINVAL, "devmm_sim_stats_get: out is NULL or its struct_size is "
                                         "not set");
  sim__stats(&out->streams_created, &out->streams_live, &out->events_created, &out->events_live,
             &out->allocations_live, &out->bytes_live, &out->frees_pending);
  return DEVMM_OK;
}

API int devmm_sim_runtime_state(void) { return sim__runtime_state(); }

API int devmm_sim_default_pool_threshold(int device, uint64_t *out) {
  simMemPool_t pool;
  simError_t e = simDeviceGetDefaultMemPool(&pool, device);
  if (!e)
    e = simMemPoolGetAttribute(pool, simMemPoolAttrReleaseThreshold, out);
  return status(e, "MemPoolGetAttribute");
}

/* ------------------------------------------------------------------ stream capture */

API int devmm_sim_capture_begin(void *stream, int mode) {
  return status(simStreamBeginCapture(stream, (simStreamCaptureMode)mode), "StreamBeginCapture");
}

API int devmm_sim_capture_end(void *stream, void **graph) {
  if (!graph)
    return host->set_error(DEVMM_EINVAL, "devmm_sim_capture_end: graph is NULL");
  return status(simStreamEndCapture(stream, (simGraph_t *)graph), "StreamEndCapture");
}

API int devmm_sim_capture_status(void *stream, int *capture_status, uint64_t *id) {
  if (!capture_status)
    return host->set_error(DEVMM_EINVAL, "devmm_sim_capture_status: status is NULL");
  simStreamCaptureStatus st;
  unsigned long long x = 0;
  simError_t e = simStreamGetCaptureInfo(stream, &st, &x);
  *capture_status = e ? -1 : (int)st;
  if (id)
    *id = x;
  return status(e, "StreamGetCaptureInfo");
}

API int devmm_sim_capture_mode(int *mode) {
  if (!mode)
    return host->set_error(DEVMM_EINVAL, "devmm_sim_capture_mode: mode is NULL");
  simStreamCaptureMode m = (simStreamCaptureMode)*mode;
  simError_t e = simThreadExchangeStreamCaptureMode(&m);
  if (!e)
    *mode = (int)m;
  return status(e, "ThreadExchangeStreamCaptureMode");
}

API int devmm_sim_graph_launch(void *graph, void *stream) {
  return status(simGraphLaunch(graph, stream), "GraphLaunch");
}

API int devmm_sim_graph_destroy(void *graph) {
  return status(simGraphDestroy(graph), "GraphDestroy");
}

API size_t devmm_sim_graph_nodes(void *graph) { return sim__graph_nodes(graph); }

API int devmm_sim_malloc(int device, size_t n, void **ptr) {
  if (!ptr)
    return host->set_error(DEVMM_EINVAL, "devmm_sim_malloc: ptr is NULL");
  int prev;
  simGetDevice(&prev);
  simError_t e = simSetDevice(device);
  if (!e)
    e = simMalloc(ptr, n);
  simSetDevice(prev);
  return status(e, "Malloc");
}

API int devmm_sim_free(void *ptr) { return status(simFree(ptr), "Free"); }

API int devmm_sim_preferred_location(const void *ptr, int *location) {
  if (!location)
    return host->set_error(DEVMM_EINVAL, "devmm_sim_preferred_location: location is NULL");
  *location = -2;
  int loc;
  if (simPreferredLocation(ptr, &loc) == simSuccess)
    *location = loc;
  return DEVMM_OK;
}

API int devmm_sim_pool_create(int device, void **pool) {
  if (!pool)
    return host->set_error(DEVMM_EINVAL, "devmm_sim_pool_create: pool is NULL");
  simMemPoolProps props = {
      simMemAllocationTypePinned, simMemHandleTypeNone, {simMemLocationTypeDevice, device}, 0};
  return status(simMemPoolCreate((simMemPool_t *)pool, &props), "MemPoolCreate");
}

API int devmm_sim_pool_destroy(void *pool) {
  return status(simMemPoolDestroy(pool), "MemPoolDestroy");
}
