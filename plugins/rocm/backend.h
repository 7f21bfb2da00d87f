/* HIP behind plugins/gpu/gpu.c (Debian's libamdhip64-dev, compiled from C with
 * -D__HIP_PLATFORM_AMD__). */
#ifndef DEVMM_GPU_BACKEND_H
#define DEVMM_GPU_BACKEND_H

#include <hip/hip_runtime_api.h>

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
#define gpuGetErrorString hipGetErrorString
#define gpuGetErrorName hipGetErrorName
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuGetDevice hipGetDevice
#define gpuSetDevice hipSetDevice
#define gpuDeviceSynchronize hipDeviceSynchronize
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMallocManaged hipMallocManaged
#define gpuMemAttachGlobal hipMemAttachGlobal
#define gpuHostAlloc(p, n) hipHostMalloc((p), (n), hipHostMallocDefault)
#define gpuFreeHost hipHostFree
#define gpuMallocFromPoolAsync hipMallocFromPoolAsync
#define gpuFreeAsync hipFreeAsync
#define gpuDeviceGetDefaultMemPool hipDeviceGetDefaultMemPool
#define gpuMemPoolCreate hipMemPoolCreate
#define gpuMemPoolDestroy hipMemPoolDestroy
#define gpuMemPoolSetAttribute hipMemPoolSetAttribute
#define gpuMemPoolAttrReleaseThreshold hipMemPoolAttrReleaseThreshold
#define gpuMemGetInfo hipMemGetInfo
#define gpuMemcpyAsync(d, s, n, st) hipMemcpyAsync((d), (s), (n), hipMemcpyDefault, (st))
#define gpuMemsetAsync hipMemsetAsync
#define gpuEventCreateWithFlags hipEventCreateWithFlags
#define gpuEventDisableTiming hipEventDisableTiming
#define gpuEventRecord hipEventRecord
#define gpuEventDestroy hipEventDestroy
#define gpuStreamWaitEvent hipStreamWaitEvent
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuMemAdviseSetReadMostly hipMemAdviseSetReadMostly
#define gpuMemAdviseSetPreferredLocation hipMemAdviseSetPreferredLocation
#define gpuMemAdviseSetAccessedBy hipMemAdviseSetAccessedBy
typedef hipMemoryAdvise gpuMemoryAdvise;

static inline gpuError_t gpu_prefetch(const void *p, size_t n, int device, gpuStream_t s) {
  return hipMemPrefetchAsync(p, n, device, s);
}

static inline gpuError_t gpu_advise(const void *p, size_t n, gpuMemoryAdvise a, int device) {
  return hipMemAdvise(p, n, a, device);
}

static inline void gpu_pool_props(gpuMemPoolProps *p, int device, size_t max_size) {
  (void)max_size; /* never set: gpu.c refuses max_pool_size (GPU_POOL_HAS_MAX_SIZE 0) */
  p->allocType = hipMemAllocationTypePinned;
  p->handleTypes = hipMemHandleTypeNone;
  p->location.type = hipMemLocationTypeDevice;
  p->location.id = device;
}

static inline const char *gpu_runtime_version(char *buf, size_t cap) {
  int v = 0;
  hipRuntimeGetVersion(&v);
  snprintf(buf, cap, "HIP runtime %d", v);
  return buf;
}

#endif
