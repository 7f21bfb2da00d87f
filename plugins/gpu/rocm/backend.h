/* HIP behind the GPU plugin (plugins/gpu/; compiled from C with -D__HIP_PLATFORM_AMD__ against
 * Debian's HIP 5.2 headers, which check every call's signature). The plugin links no HIP library:
 * hip_loader.c dlopens libamdhip64.so.7, then .so.6, then .so.5, at the first device count or
 * resource (never at the plugin's entry: ADR 38), resolves
 * the calls listed in ROCM_HIP_CALLS into rocm_hip, and every gpuX below goes through that table.
 * Without HIP the plugin loads and reports "0 devices: no HIP runtime found (...)". A new call
 * goes into ROCM_HIP_CALLS and gets its gpuX macro here. */
#ifndef DEVMM_GPU_BACKEND_H
#define DEVMM_GPU_BACKEND_H

#include <hip/hip_runtime_api.h>
#include <stdio.h>

/* name (without "hip"): every HIP call the plugin makes. hipGetDeviceProperties is resolved as
 * hipGetDevicePropertiesR0000 where it exists (HIP 6 keeps the HIP 5 struct layout under that
 * name), else as itself (HIP 5). */
#define ROCM_HIP_CALLS(X)                                                                          \
  X(GetErrorString)                                                                                \
  X(GetErrorName)                                                                                  \
  X(RuntimeGetVersion)                                                                             \
  X(GetDeviceCount)                                                                                \
  X(GetDeviceProperties)                                                                           \
  X(GetDevice)                                                                                     \
  X(SetDevice)                                                                                     \
  X(Malloc)                                                                                        \
  X(Free)                                                                                          \
  X(MallocManaged)                                                                                 \
  X(HostMalloc)                                                                                    \
  X(HostFree)                                                                                      \
  X(MallocFromPoolAsync)                                                                           \
  X(FreeAsync)                                                                                     \
  X(DeviceGetDefaultMemPool)                                                                       \
  X(MemPoolCreate)                                                                                 \
  X(MemPoolDestroy)                                                                                \
  X(MemPoolSetAttribute)                                                                           \
  X(MemGetInfo)                                                                                    \
  X(MemcpyAsync)                                                                                   \
  X(MemsetAsync)                                                                                   \
  X(EventCreateWithFlags)                                                                          \
  X(EventRecord)                                                                                   \
  X(EventDestroy)                                                                                  \
  X(StreamWaitEvent)                                                                               \
  X(StreamSynchronize)                                                                             \
  X(DeviceSynchronize)                                                                             \
  X(MemPrefetchAsync)                                                                              \
  X(MemAdvise)                                                                                     \
  X(EventSynchronize)                                                                              \
  X(StreamIsCapturing)                                                                             \
  X(PeekAtLastError)                                                                               \
  X(GetLastError)                                                                                  \
  X(DeviceGetAttribute)                                                                            \
  X(MemPoolGetAttribute)

#define ROCM_HIP_POINTER(name) __typeof__(hip##name) *name;
struct rocm_hip {
  ROCM_HIP_CALLS(ROCM_HIP_POINTER)
};
#undef ROCM_HIP_POINTER
extern struct rocm_hip rocm_hip;

/* Loads HIP once (thread-safe); hipSuccess, or ROCM_NO_HIP with rocm_hip_tried() saying why. */
#define ROCM_NO_HIP hipErrorSharedObjectInitFailed
hipError_t rocm_hip_load(void);
/* "<each library tried>: <why>", separated by "; ", or "" once loaded. */
const char *rocm_hip_tried(void);
/* The library that was loaded ("libamdhip64.so.6"), or NULL. */
const char *rocm_hip_library(void);

static inline hipError_t rocm_get_device_count(int *n) {
  hipError_t e = rocm_hip_load();
  if (e != hipSuccess) {
    *n = 0;
    return e;
  }
  return rocm_hip.GetDeviceCount(n);
}

/* The GPU plugin reports a failed call as "<error string> (<error name>)". Without HIP there is no
 * HIP error to name: the string is "no HIP runtime found" and the name slot carries what was tried,
 * so the message reads "no HIP runtime found (<library>: <why>; ...)". */
static inline const char *rocm_error_string(hipError_t e) {
  return rocm_hip.GetErrorString ? rocm_hip.GetErrorString(e) : "no HIP runtime found";
}

static inline const char *rocm_error_name(hipError_t e) {
  return rocm_hip.GetErrorName ? rocm_hip.GetErrorName(e) : rocm_hip_tried();
}

#define GPU_PLUGIN "rocm"
#define GPU_PREFIX "hip" /* the runtime's call names in messages: hipMallocFromPoolAsync */
#define GPU_DESCRIPTION "HIP runtime: hipMalloc, hipMallocAsync pools, managed, pinned"
#define GPU_DEVICE_TYPE DEVMM_DEVICE_ROCM
#define GPU_HOST_TYPE DEVMM_DEVICE_ROCM_HOST
#define GPU_MANAGED_TYPE DEVMM_DEVICE_ROCM /* DLPack has no ROCm-managed device type */
#define GPU_NATIVE_ALIGNMENT 256
/* HIP 5.x's hipMemPoolProps has no maxSize: max_pool_size is refused, never dropped */
#define GPU_POOL_HAS_MAX_SIZE 0

typedef hipError_t gpuError_t;
typedef hipStream_t gpuStream_t;
typedef hipEvent_t gpuEvent_t;
typedef hipMemPool_t gpuMemPool_t;
typedef hipMemPoolProps gpuMemPoolProps;
typedef hipDeviceProp_t gpuDeviceProp;

#define gpuSuccess hipSuccess
#define gpuErrorMemoryAllocation hipErrorOutOfMemory
#define gpuGetErrorString rocm_error_string
#define gpuGetErrorName rocm_error_name
#define gpuGetDeviceCount rocm_get_device_count
#define gpuGetDeviceProperties rocm_hip.GetDeviceProperties
#define gpuGetDevice rocm_hip.GetDevice
#define gpuSetDevice rocm_hip.SetDevice
#define gpuDeviceSynchronize rocm_hip.DeviceSynchronize
#define gpuMalloc rocm_hip.Malloc
#define gpuFree rocm_hip.Free
#define gpuMallocManaged rocm_hip.MallocManaged
#define gpuMemAttachGlobal hipMemAttachGlobal
#define gpuHostAlloc(p, n) rocm_hip.HostMalloc((p), (n), hipHostMallocPortable) /* for all */
#define gpuFreeHost rocm_hip.HostFree
#define gpuMallocFromPoolAsync rocm_hip.MallocFromPoolAsync
#define gpuFreeAsync rocm_hip.FreeAsync
#define gpuDeviceGetDefaultMemPool rocm_hip.DeviceGetDefaultMemPool
#define gpuMemPoolCreate rocm_hip.MemPoolCreate
#define gpuMemPoolDestroy rocm_hip.MemPoolDestroy
#define gpuMemPoolSetAttribute rocm_hip.MemPoolSetAttribute
#define gpuMemPoolAttrReleaseThreshold hipMemPoolAttrReleaseThreshold
#define gpuMemGetInfo rocm_hip.MemGetInfo
#define gpuMemcpyAsync(d, s, n, st) rocm_hip.MemcpyAsync((d), (s), (n), hipMemcpyDefault, (st))
#define gpuMemsetAsync rocm_hip.MemsetAsync
#define gpuEventCreateWithFlags rocm_hip.EventCreateWithFlags
#define gpuEventDisableTiming hipEventDisableTiming
#define gpuEventRecord rocm_hip.EventRecord
#define gpuEventDestroy rocm_hip.EventDestroy
#define gpuStreamWaitEvent rocm_hip.StreamWaitEvent
#define gpuStreamSynchronize rocm_hip.StreamSynchronize
#define gpuMemAdviseSetReadMostly hipMemAdviseSetReadMostly
#define gpuMemAdviseSetPreferredLocation hipMemAdviseSetPreferredLocation
#define gpuMemAdviseSetAccessedBy hipMemAdviseSetAccessedBy
typedef hipMemoryAdvise gpuMemoryAdvise;

#define gpuEventSynchronize rocm_hip.EventSynchronize

/* 1 if s captures (NULL: whether a blocking stream of the current device does: the null stream
 * answers hipErrorStreamCaptureImplicit), else 0; as the CUDA backend's, the query's error is
 * cleared and it is not asked while an earlier one is pending. */
static inline int gpu_capture_status(gpuStream_t s) {
  int pending = rocm_hip.PeekAtLastError() != hipSuccess;
  if (pending && !s)
    return -1; /* unknown, as the CUDA backend's: capture.c refuses, naming the pending error */
  hipStreamCaptureStatus st = hipStreamCaptureStatusNone;
  hipError_t e = rocm_hip.StreamIsCapturing(s, &st);
  if (e != hipSuccess && !pending)
    (void)rocm_hip.GetLastError();
  return e == hipErrorStreamCaptureImplicit ? 1
                                            : e == hipSuccess && st != hipStreamCaptureStatusNone;
}

static inline gpuError_t gpu_prefetch(const void *p, size_t n, int device, gpuStream_t s) {
  return rocm_hip.MemPrefetchAsync(p, n, device, s);
}

static inline gpuError_t gpu_advise(const void *p, size_t n, gpuMemoryAdvise a, int device) {
  return rocm_hip.MemAdvise(p, n, a, device);
}

/* System-allocated memory (<gpu>.system, kinds.c): whether the device addresses pageable memory
 * (*v: the attribute), its name and what a machine needs for it, for the refusal; the host as
 * an advice location; and the plugin's free(3) of such memory (the simulator drops its advice). */
static inline gpuError_t gpu_pageable_access(int *v, int device) {
  return rocm_hip.DeviceGetAttribute(v, hipDeviceAttributePageableMemoryAccess, device);
}
#define GPU_PAGEABLE_ATTR "hipDeviceAttributePageableMemoryAccess"
#define GPU_PAGEABLE_NEEDS "needs HMM (amdgpu with HMM and XNACK enabled)"
#define gpuCpuDeviceId hipCpuDeviceId
#define gpu_system_freed(p, n) ((void)(p), (void)(n))
/* A pool another library owns (<gpu>.async with pool = <address>): it answers a query. */
static inline gpuError_t gpu_pool_check(gpuMemPool_t pool) {
  uint64_t t = 0;
  return rocm_hip.MemPoolGetAttribute(pool, hipMemPoolAttrReleaseThreshold, &t);
}

/* (Not in HIP.) The device's default pool of managed memory (<gpu>.async with pool = managed, RMM's
 * CudaAsyncManagedMemoryResource); gpu_managed_pool_unsupported: 1, with why, where the runtime
 * in use cannot (GPU_HAS_MANAGED_POOL 0: where the build cannot, GPU_MANAGED_POOL_WHY says why). */
#define GPU_HAS_MANAGED_POOL 0
#define GPU_MANAGED_POOL_WHY                                                                       \
  "HIP has no pools of managed memory (rocm.managed allocates managed memory)"

static inline void gpu_pool_props(gpuMemPoolProps *p, int device, size_t max_size) {
  (void)max_size; /* never set: kinds.c refuses max_pool_size (GPU_POOL_HAS_MAX_SIZE 0) */
  p->allocType = hipMemAllocationTypePinned;
  p->handleTypes = hipMemHandleTypeNone;
  p->location.type = hipMemLocationTypeDevice;
  p->location.id = device;
}

/* Loads HIP, and names the runtime found (or its absence): at the first device count, never at
 * the plugin's entry (loading HIP is most of a process's start-up otherwise: ADR 38). */
#define GPU_RUNTIME_VERSION_AT_FIRST_USE 1
#define GPU_RUNTIME_NOT_LOADED "HIP: found at the first use of a rocm device"
static inline const char *gpu_runtime_version(char *buf, size_t cap) {
  int v = 0;
  if (rocm_hip_load() != hipSuccess)
    snprintf(buf, cap, "no HIP runtime");
  else if (rocm_hip.RuntimeGetVersion(&v) == hipSuccess)
    snprintf(buf, cap, "HIP runtime %d, %s", v, rocm_hip_library());
  else
    snprintf(buf, cap, "%s", rocm_hip_library());
  return buf;
}

/* IPC (ADR 30): not yet for HIP. hipIpcGetMemHandle exists, but hip_loader.c does
 * not load it: rocm.* resources answer DEVMM_ENOTSUP, saying so. */
#define GPU_HAS_IPC 0
#define GPU_HAS_POOL_IPC 0

#endif
