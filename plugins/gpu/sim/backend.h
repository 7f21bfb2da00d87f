/* The simulated runtime behind the GPU plugin (plugins/gpu/; the runtime: simrt.h):
 * devmm-sim is the GPU plugin's one source built a third time, so its tests exercise that source
 * itself. */
#ifndef DEVMM_GPU_BACKEND_H
#define DEVMM_GPU_BACKEND_H

#include "simrt.h"

#include <stdio.h>

#define GPU_PLUGIN "sim"
#define GPU_PREFIX "sim"
#define GPU_DESCRIPTION                                                                            \
  "simulated accelerator (the GPU plugin's source over a CPU runtime): device memory the host "    \
  "cannot touch, streams with seeded jitter"
#define GPU_DEVICE_TYPE DEVMM_DEVICE_SIM
/* pinned and managed memory: devmm's own device types (sim_host, sim_managed), apart as CUDA's
 * are, and never CUDA's (ADR 37) */
#define GPU_HOST_TYPE DEVMM_DEVICE_SIM_HOST
#define GPU_MANAGED_TYPE DEVMM_DEVICE_SIM_MANAGED
#define GPU_NATIVE_ALIGNMENT 256
#define GPU_POOL_HAS_MAX_SIZE 1
#define GPU_DEVICE_COUNT_VARIES 1 /* [plugin sim] devices = N may change at each load */

typedef simError_t gpuError_t;
typedef simStream_t gpuStream_t;
typedef simEvent_t gpuEvent_t;
typedef simMemPool_t gpuMemPool_t;
typedef simMemPoolProps gpuMemPoolProps;
typedef simDeviceProp gpuDeviceProp;

#define gpuSuccess simSuccess
#define gpuErrorMemoryAllocation simErrorMemoryAllocation
#define gpuGetErrorString simGetErrorString
#define gpuGetErrorName simGetErrorName
#define gpuGetDeviceCount simGetDeviceCount
#define gpuGetDeviceProperties simGetDeviceProperties
#define gpuGetDevice simGetDevice
#define gpuSetDevice simSetDevice
#define gpuDeviceSynchronize simDeviceSynchronize
#define gpuMalloc simMalloc
#define gpuFree simFree
#define gpuMallocManaged simMallocManaged
#define gpuMemAttachGlobal simMemAttachGlobal
#define gpuHostAlloc(p, n) simHostAlloc((p), (n), simHostAllocPortable) /* pinned for all */
#define gpuFreeHost simFreeHost
#define gpuMallocFromPoolAsync simMallocFromPoolAsync
#define gpuFreeAsync simFreeAsync
#define gpuDeviceGetDefaultMemPool simDeviceGetDefaultMemPool
#define gpuMemPoolCreate simMemPoolCreate
#define gpuMemPoolDestroy simMemPoolDestroy
#define gpuMemPoolSetAttribute simMemPoolSetAttribute
#define gpuMemPoolAttrReleaseThreshold simMemPoolAttrReleaseThreshold
#define gpuMemGetInfo simMemGetInfo
#define gpuMemcpyAsync(d, s, n, st) simMemcpyAsync((d), (s), (n), simMemcpyDefault, (st))
#define gpuMemsetAsync simMemsetAsync
#define gpuEventCreateWithFlags simEventCreateWithFlags
#define gpuEventDisableTiming simEventDisableTiming
#define gpuEventRecord simEventRecord
#define gpuEventDestroy simEventDestroy
#define gpuStreamWaitEvent simStreamWaitEvent
#define gpuStreamSynchronize simStreamSynchronize
#define gpuEventSynchronize simEventSynchronize
#define gpuStreamLegacy simStreamLegacy
#define gpuMemAdviseSetReadMostly simMemAdviseSetReadMostly
#define gpuMemAdviseSetPreferredLocation simMemAdviseSetPreferredLocation
#define gpuMemAdviseSetAccessedBy simMemAdviseSetAccessedBy
typedef simMemoryAdvise gpuMemoryAdvise;

/* IPC (ADR 30): sim.device shares memory as cuda.device does; the pools cannot be shared. */
#define GPU_HAS_IPC 1
#define GPU_HAS_POOL_IPC 0
typedef simIpcMemHandle_t gpuIpcMemHandle_t;
#define gpuIpcGetMemHandle simIpcGetMemHandle
#define gpu_address_range simMemGetAddressRange
#define gpuIpcOpenMemHandle(p, h) simIpcOpenMemHandle((p), (h), 0)
#define gpuIpcCloseMemHandle simIpcCloseMemHandle
#define gpu_ipc_reason() simIpcReason()
/* what CUDA answers for a handle whose memory is gone: the exporter's liveness says the rest */
#define gpu_ipc_stale(e) ((e) == simErrorMapBufferObjectFailed)
/* whether a context is bound to the calling thread (the driver-level calls need one) */
static inline int gpu_context_bound(void) {
  int d;
  simCtxGetCurrent(&d);
  return d >= 0;
}

/* 1 if s captures (NULL: whether a blocking stream of the current device does, which the legacy
 * stream answers with simErrorStreamCaptureImplicit), else 0 (capture.c of the plugin). */
static inline int gpu_capture_status(gpuStream_t s) {
  simStreamCaptureStatus st = simStreamCaptureStatusNone;
  simError_t e = simStreamIsCapturing(s ? s : simStreamLegacy, &st);
  return e == simErrorStreamCaptureImplicit ? 1
                                            : e == simSuccess && st != simStreamCaptureStatusNone;
}

static inline gpuError_t gpu_prefetch(const void *p, size_t n, int device, gpuStream_t s) {
  return simMemPrefetchAsync(p, n, device, s);
}

static inline gpuError_t gpu_advise(const void *p, size_t n, gpuMemoryAdvise a, int device) {
  return simMemAdvise(p, n, a, device);
}

/* The calling thread's context, and binding it again (gpu_enter, devices.c). */
#define GPU_HAS_CONTEXTS 1
typedef simCtx_t gpuCtx_t;
static inline gpuCtx_t gpu_ctx_current(void) {
  simCtx_t c = NULL;
  simCtxGetCurrentHandle(&c);
  return c;
}
#define gpu_ctx_set simCtxSetCurrent

/* An own pool grants a peer device read-write access (kinds.c): a pool's memory does not follow
 * peer access. */
#define GPU_HAS_POOL_ACCESS 1
#define gpuDeviceCanAccessPeer simDeviceCanAccessPeer
static inline gpuError_t gpu_pool_grant(gpuMemPool_t pool, int peer) {
  simMemAccessDesc d = {{simMemLocationTypeDevice, peer}, simMemAccessFlagsProtReadWrite};
  return simMemPoolSetAccess(pool, &d, 1);
}

static inline void gpu_pool_props(gpuMemPoolProps *p, int device, size_t max_size) {
  p->allocType = simMemAllocationTypePinned;
  p->handleTypes = simMemHandleTypeNone;
  p->location.type = simMemLocationTypeDevice;
  p->location.id = device;
  p->maxSize = max_size;
}

static inline const char *gpu_runtime_version(char *buf, size_t cap) {
  int v = 0;
  simRuntimeGetVersion(&v);
  snprintf(buf, cap, "sim runtime %d.%d", v / 1000, (v % 1000) / 10);
  return buf;
}

/* System-allocated memory (<gpu>.system, kinds.c): whether the device addresses pageable memory
 * (*v: the attribute), its name and what a machine needs for it, for the refusal; the host as
 * an advice location; and the plugin's free(3) of such memory (the simulator drops its advice). */
static inline gpuError_t gpu_pageable_access(int *v, int device) {
  return simDeviceGetAttribute(v, simDevAttrPageableMemoryAccess, device);
}
#define GPU_PAGEABLE_ATTR "simDevAttrPageableMemoryAccess"
#define GPU_PAGEABLE_NEEDS "the simulator has it with [plugin sim] pageable_access = true"
#define gpuCpuDeviceId simCpuDeviceId
#define gpu_system_freed simHostFreed
/* A pool another library owns (<gpu>.async with pool = <address>): it answers a query. */
static inline gpuError_t gpu_pool_check(gpuMemPool_t pool) {
  uint64_t t = 0;
  return simMemPoolGetAttribute(pool, simMemPoolAttrReleaseThreshold, &t);
}

/* The device's default pool of managed memory (<gpu>.async with pool = managed, RMM's
 * CudaAsyncManagedMemoryResource); gpu_managed_pool_unsupported: 1, with why, where the runtime
 * in use cannot (GPU_HAS_MANAGED_POOL 0: where the build cannot, GPU_MANAGED_POOL_WHY says why). */
#define GPU_HAS_MANAGED_POOL 1
static inline gpuError_t gpu_default_managed_pool(gpuMemPool_t *pool, int device) {
  return simMemGetDefaultMemPool(pool, device, simMemAllocationTypeManaged);
}
static inline int gpu_managed_pool_unsupported(char *why, size_t cap) {
  (void)why, (void)cap;
  return 0;
}

/* The plugin-wide options of [plugin sim] (test_entry.c). */
struct devmm_host_services;
struct devmm_option;
extern const char *const sim_plugin_options[];
int sim_configure(const struct devmm_option *options, size_t n);
void sim_on_entry(const struct devmm_host_services *host);
#define GPU_PLUGIN_OPTIONS sim_plugin_options
#define GPU_CONFIGURE sim_configure
#define GPU_ON_ENTRY(h) sim_on_entry(h)

#endif
