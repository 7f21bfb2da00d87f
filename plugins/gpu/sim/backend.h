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
#define GPU_HOST_TYPE DEVMM_DEVICE_CPU /* page-locked host memory is CPU memory in DLPack */
#define GPU_MANAGED_TYPE DEVMM_DEVICE_SIM
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
#define gpuHostAlloc(p, n) simHostAlloc((p), (n), simHostAllocDefault)
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
#define gpu_ipc_stale(e) ((e) == simErrorInvalidResourceHandle) /* exporter gone or freed */

static inline gpuError_t gpu_prefetch(const void *p, size_t n, int device, gpuStream_t s) {
  return simMemPrefetchAsync(p, n, device, s);
}

static inline gpuError_t gpu_advise(const void *p, size_t n, gpuMemoryAdvise a, int device) {
  return simMemAdvise(p, n, a, device);
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
