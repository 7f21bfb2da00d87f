/* The CUDA runtime behind the GPU plugin (plugins/gpu/): names, device types and the few calls
 * whose signatures differ between CUDA and HIP. */
#ifndef DEVMM_GPU_BACKEND_H
#define DEVMM_GPU_BACKEND_H

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>

#define GPU_PLUGIN "cuda"
#define GPU_PREFIX "cuda" /* the runtime's call names in messages: cudaMallocFromPoolAsync */
#define GPU_DESCRIPTION "CUDA runtime: cudaMalloc, cudaMallocAsync pools, managed, pinned"
#define GPU_DEVICE_TYPE DEVMM_DEVICE_CUDA
#define GPU_HOST_TYPE DEVMM_DEVICE_CUDA_HOST
#define GPU_MANAGED_TYPE DEVMM_DEVICE_CUDA_MANAGED
#define GPU_NATIVE_ALIGNMENT 256 /* cudaMalloc's guarantee */
#define GPU_POOL_HAS_MAX_SIZE 1

typedef cudaError_t gpuError_t;
typedef cudaStream_t gpuStream_t;
typedef cudaEvent_t gpuEvent_t;
typedef cudaMemPool_t gpuMemPool_t;
typedef struct cudaMemPoolProps gpuMemPoolProps;
typedef struct cudaDeviceProp gpuDeviceProp;

#define gpuSuccess cudaSuccess
#define gpuErrorMemoryAllocation cudaErrorMemoryAllocation
#define gpuGetErrorString cudaGetErrorString
#define gpuGetErrorName cudaGetErrorName
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuGetDevice cudaGetDevice
#define gpuSetDevice cudaSetDevice
#define gpuDeviceSynchronize cudaDeviceSynchronize
#define gpuStreamLegacy cudaStreamLegacy
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMallocManaged cudaMallocManaged
#define gpuMemAttachGlobal cudaMemAttachGlobal
#define gpuHostAlloc(p, n) cudaHostAlloc((p), (n), cudaHostAllocDefault)
#define gpuFreeHost cudaFreeHost
#define gpuMallocFromPoolAsync cudaMallocFromPoolAsync
#define gpuFreeAsync cudaFreeAsync
#define gpuDeviceGetDefaultMemPool cudaDeviceGetDefaultMemPool
#define gpuMemPoolCreate cudaMemPoolCreate
#define gpuMemPoolDestroy cudaMemPoolDestroy
#define gpuMemPoolSetAttribute cudaMemPoolSetAttribute
#define gpuMemPoolAttrReleaseThreshold cudaMemPoolAttrReleaseThreshold
#define gpuMemAllocationTypePinned cudaMemAllocationTypePinned
#define gpuMemLocationTypeDevice cudaMemLocationTypeDevice
#define gpuMemHandleTypeNone cudaMemHandleTypeNone
#define gpuMemGetInfo cudaMemGetInfo
#define gpuMemcpyAsync(d, s, n, st) cudaMemcpyAsync((d), (s), (n), cudaMemcpyDefault, (st))
#define gpuMemsetAsync cudaMemsetAsync
#define gpuEventCreateWithFlags cudaEventCreateWithFlags
#define gpuEventDisableTiming cudaEventDisableTiming
#define gpuEventRecord cudaEventRecord
#define gpuEventDestroy cudaEventDestroy
#define gpuStreamWaitEvent cudaStreamWaitEvent
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuMemAdviseSetReadMostly cudaMemAdviseSetReadMostly
#define gpuMemAdviseSetPreferredLocation cudaMemAdviseSetPreferredLocation
#define gpuMemAdviseSetAccessedBy cudaMemAdviseSetAccessedBy
typedef enum cudaMemoryAdvise gpuMemoryAdvise;

/* IPC (ADR 30): cudaIpc* for cuda.device. cuda.async with ipc = true is refused (ADR 33): the
 * pool's shareable handle is a driver descriptor that reopening /proc/<pid>/fd/<n> cannot
 * duplicate (it needs pidfd_getfd or SCM_RIGHTS); the code stays for that later work. */
#define GPU_HAS_IPC 1
#define GPU_HAS_POOL_IPC 0
#define GPU_POOL_IPC_WHY                                                                           \
  " yet: a pool's shareable handle is a driver descriptor, which only pidfd_getfd or a Unix "      \
  "socket can pass to another process, and devmm does neither (ADR 33)"
typedef cudaIpcMemHandle_t gpuIpcMemHandle_t;
typedef struct cudaMemPoolPtrExportData gpuMemPoolPtrExportData;
#define gpuIpcGetMemHandle cudaIpcGetMemHandle

/* The base and size of the allocation containing p: the driver's cuMemGetAddressRange (the
 * runtime has no such call), found in the libcuda.so.1 the runtime loaded. */
static inline gpuError_t gpu_address_range(void **base, size_t *size, void *p) {
  typedef int (*range_fn)(unsigned long long *, size_t *, unsigned long long);
  static range_fn fn;
  if (!fn) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (lib)
      *(void **)&fn = dlsym(lib, "cuMemGetAddressRange_v2");
    if (!fn)
      return cudaErrorNotSupported;
  }
  unsigned long long b = 0;
  if (fn(&b, size, (unsigned long long)(uintptr_t)p) != 0)
    return cudaErrorInvalidValue;
  *base = (void *)(uintptr_t)b;
  return cudaSuccess;
}
#define gpuIpcOpenMemHandle(p, h) cudaIpcOpenMemHandle((p), (h), cudaIpcMemLazyEnablePeerAccess)
#define gpuIpcCloseMemHandle cudaIpcCloseMemHandle
#define gpu_ipc_reason() ""
#define gpu_ipc_stale(e) ((void)(e), 0) /* CUDA has no code that means only that */
#define GPU_POOL_IPC_HANDLE_TYPE cudaMemHandleTypePosixFileDescriptor
#define gpuMemPoolExportToShareableHandle cudaMemPoolExportToShareableHandle
#define gpuMemPoolImportFromShareableHandle cudaMemPoolImportFromShareableHandle
#define gpuMemPoolExportPointer cudaMemPoolExportPointer
#define gpuMemPoolImportPointer cudaMemPoolImportPointer

/* CUDA 13 takes a cudaMemLocation where CUDA 12 and HIP take a device number. */
static inline gpuError_t gpu_prefetch(const void *p, size_t n, int device, gpuStream_t s) {
#if CUDART_VERSION >= 13000
  struct cudaMemLocation loc = {cudaMemLocationTypeDevice, device};
  return cudaMemPrefetchAsync(p, n, loc, 0, s);
#else
  return cudaMemPrefetchAsync(p, n, device, s);
#endif
}

static inline gpuError_t gpu_advise(const void *p, size_t n, gpuMemoryAdvise a, int device) {
#if CUDART_VERSION >= 13000
  struct cudaMemLocation loc = {cudaMemLocationTypeDevice, device};
  return cudaMemAdvise(p, n, a, loc);
#else
  return cudaMemAdvise(p, n, a, device);
#endif
}

static inline void gpu_pool_props(gpuMemPoolProps *p, int device, size_t max_size) {
  p->allocType = cudaMemAllocationTypePinned;
  p->handleTypes = cudaMemHandleTypeNone;
  p->location.type = cudaMemLocationTypeDevice;
  p->location.id = device;
  p->maxSize = max_size;
}

/* The static runtime says "CUDA driver version is insufficient for CUDA runtime version" both
 * for an old driver and for none at all: tell the second case apart by loading the driver. */
#define GPU_HAS_DRIVER_CHECK 1
static inline int gpu_driver_missing(gpuError_t e, char *why, size_t cap) {
  if (e != cudaErrorInsufficientDriver)
    return 0;
  void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h) {
    dlclose(h);
    return 0; /* a driver is there: it is too old, as the runtime says */
  }
  const char *err = dlerror();
  snprintf(why, cap, "no CUDA driver was found (libcuda.so.1 cannot be loaded: %.160s)",
           err ? err : "unknown reason");
  return 1;
}

static inline const char *gpu_runtime_version(char *buf, size_t cap) {
  int v = 0;
  cudaRuntimeGetVersion(&v);
  snprintf(buf, cap, "CUDA runtime %d.%d", v / 1000, (v % 1000) / 10);
  return buf;
}

#endif
