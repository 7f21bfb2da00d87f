/* HIP behind the GPU plugin (plugins/gpu/; compiled from C with -D__HIP_PLATFORM_AMD__ against
 * Debian's HIP 5.2 headers, which check every call's signature). The plugin links no HIP library:
 * hip_loader.c dlopens libamdhip64.so.6, then libamdhip64.so.5, at the plugin's entry, resolves
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
  X(MemAdvise)

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
#define gpuHostAlloc(p, n) rocm_hip.HostMalloc((p), (n), hipHostMallocDefault)
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

static inline gpuError_t gpu_prefetch(const void *p, size_t n, int device, gpuStream_t s) {
  return rocm_hip.MemPrefetchAsync(p, n, device, s);
}

static inline gpuError_t gpu_advise(const void *p, size_t n, gpuMemoryAdvise a, int device) {
  return rocm_hip.MemAdvise(p, n, a, device);
}

static inline void gpu_pool_props(gpuMemPoolProps *p, int device, size_t max_size) {
  (void)max_size; /* never set: kinds.c refuses max_pool_size (GPU_POOL_HAS_MAX_SIZE 0) */
  p->allocType = hipMemAllocationTypePinned;
  p->handleTypes = hipMemHandleTypeNone;
  p->location.type = hipMemLocationTypeDevice;
  p->location.id = device;
}

/* Called at the plugin's entry: loads HIP, and names the runtime found (or its absence). */
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
