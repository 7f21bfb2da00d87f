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
#define gpuHostAlloc(p, n) cudaHostAlloc((p), (n), cudaHostAllocPortable) /* pinned for all */
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
#define gpuEventSynchronize cudaEventSynchronize
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
  int rc = fn(&b, size, (unsigned long long)(uintptr_t)p);
  if (rc != 0) /* CUDA_ERROR_INVALID_CONTEXT (201): no context on this thread */
    return rc == 201 ? cudaErrorDeviceUninitialized : cudaErrorInvalidValue;
  *base = (void *)(uintptr_t)b;
  return cudaSuccess;
}
#define gpuIpcOpenMemHandle(p, h) cudaIpcOpenMemHandle((p), (h), cudaIpcMemLazyEnablePeerAccess)
#define gpuIpcCloseMemHandle cudaIpcCloseMemHandle
#define gpu_ipc_reason() ""
/* "mapping of buffer object failed": what cudaIpcOpenMemHandle answers for memory gone; it is
 * not only that, so plugins/gpu/ipc.c also asks whether the exporter still lives */
#define gpu_ipc_stale(e) ((e) == cudaErrorMapBufferObjectFailed)
/* Whether a context is bound to the calling thread: the driver's cuCtxGetCurrent (the driver-level
 * calls, cuMemGetAddressRange, need one; a thread that never made a runtime call has none). */
static inline int gpu_context_bound(void) {
  typedef int (*current_fn)(void **);
  static current_fn fn;
  if (!fn) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (lib)
      *(void **)&fn = dlsym(lib, "cuCtxGetCurrent");
    if (!fn)
      return 0; /* unknown: binding again is harmless */
  }
  void *ctx = NULL;
  return fn(&ctx) == 0 && ctx != NULL;
}
#define GPU_POOL_IPC_HANDLE_TYPE cudaMemHandleTypePosixFileDescriptor
#define gpuMemPoolExportToShareableHandle cudaMemPoolExportToShareableHandle
#define gpuMemPoolImportFromShareableHandle cudaMemPoolImportFromShareableHandle
#define gpuMemPoolExportPointer cudaMemPoolExportPointer
#define gpuMemPoolImportPointer cudaMemPoolImportPointer

/* 1 if s captures (NULL: whether a blocking stream of the current device does, which the legacy
 * stream answers with cudaErrorStreamCaptureImplicit), else 0 (capture.c of the plugin). The
 * query's own error is cleared. Fails closed: while an earlier error is pending, which the
 * legacy stream's answer would overwrite (torch reads cudaGetLastError after its launches),
 * that one is not asked and the answer is -1 (unknown: capture.c refuses what a capture
 * forbids, naming the pending error); another stream is asked (a successful query leaves the
 * pending error as it was) and its own error is then not cleared. */
static inline int gpu_capture_status(gpuStream_t s) {
  int pending = cudaPeekAtLastError() != cudaSuccess;
  if (pending && !s)
    return -1;
  enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing(s ? s : cudaStreamLegacy, &st);
  if (e != cudaSuccess && !pending)
    (void)cudaGetLastError();
  return e == cudaErrorStreamCaptureImplicit
             ? 1
             : e == cudaSuccess && st != cudaStreamCaptureStatusNone;
}

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
#if CUDART_VERSION >= 13000 /* device cudaCpuDeviceId: the host */
  struct cudaMemLocation loc = {device < 0 ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice,
                                device < 0 ? 0 : device};
  return cudaMemAdvise(p, n, a, loc);
#else
  return cudaMemAdvise(p, n, a, device);
#endif
}

/* System-allocated memory (<gpu>.system, kinds.c): whether the device addresses pageable memory
 * (*v: the attribute), its name and what a machine needs for it, for the refusal; the host as
 * an advice location; and the plugin's free(3) of such memory (the simulator drops its advice). */
static inline gpuError_t gpu_pageable_access(int *v, int device) {
  return cudaDeviceGetAttribute(v, cudaDevAttrPageableMemoryAccess, device);
}
#define GPU_PAGEABLE_ATTR "cudaDevAttrPageableMemoryAccess"
#define GPU_PAGEABLE_NEEDS "needs HMM (Linux >= 6.1 with the open kernel modules) or ATS"
#define gpuCpuDeviceId cudaCpuDeviceId
#define gpu_system_freed(p, n) ((void)(p), (void)(n))
/* A pool another library owns (<gpu>.async with pool = <address>): it answers a query (CUDA
 * cannot tell every bogus handle: the caller vouches for a live cudaMemPool_t). */
static inline gpuError_t gpu_pool_check(gpuMemPool_t pool) {
  unsigned long long t = 0;
  return cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &t);
}

/* The device's default pool of managed memory (<gpu>.async with pool = managed, RMM's
 * CudaAsyncManagedMemoryResource); gpu_managed_pool_unsupported: 1, with why, where the runtime
 * in use cannot (GPU_HAS_MANAGED_POOL 0: where the build cannot, GPU_MANAGED_POOL_WHY says why). */
#if CUDART_VERSION >= 13000
#define GPU_HAS_MANAGED_POOL 1
static inline gpuError_t gpu_default_managed_pool(gpuMemPool_t *pool, int device) {
  struct cudaMemLocation loc = {cudaMemLocationTypeDevice, device};
  return cudaMemGetDefaultMemPool(pool, &loc, cudaMemAllocationTypeManaged);
}
static inline int gpu_managed_pool_unsupported(char *why, size_t cap) {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess || v >= 13000)
    return 0; /* no answer: cudaMemGetDefaultMemPool says what is wrong */
  snprintf(why, cap, "the driver supports CUDA %d.%d, and managed pools need 13.0", v / 1000,
           (v % 1000) / 10);
  return 1;
}
#else
#define GPU_HAS_MANAGED_POOL 0
#define GPU_MANAGED_POOL_WHY "devmm-cuda was built against CUDA < 13.0, which has no managed pools"
#endif

/* The calling thread's context, and binding it again (gpu_enter, devices.c): the driver's
 * cuCtxGetCurrent and cuCtxSetCurrent, found in the libcuda.so.1 the runtime loaded; NULL (then
 * gpu_enter restores the device with cudaSetDevice) where they cannot be found. */
#define GPU_HAS_CONTEXTS 1
typedef void *gpuCtx_t;
static inline void *gpu_driver_symbol(const char *name) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return lib ? dlsym(lib, name) : NULL;
}
static inline gpuCtx_t gpu_ctx_current(void) {
  static int (*fn)(void **);
  if (!fn)
    *(void **)&fn = gpu_driver_symbol("cuCtxGetCurrent");
  void *c = NULL;
  return fn && fn(&c) == 0 ? c : NULL;
}
static inline gpuError_t gpu_ctx_set(gpuCtx_t c) {
  static int (*fn)(void *);
  if (!fn)
    *(void **)&fn = gpu_driver_symbol("cuCtxSetCurrent");
  return fn && fn(c) == 0 ? cudaSuccess : cudaErrorInvalidValue;
}

/* An own pool grants a peer device read-write access (kinds.c): a pool's memory does not follow
 * cudaDeviceEnablePeerAccess (the programming guide, "Device Accessibility for Multi-GPU"). */
#define GPU_HAS_POOL_ACCESS 1
#define gpuDeviceCanAccessPeer cudaDeviceCanAccessPeer
static inline gpuError_t gpu_pool_grant(gpuMemPool_t pool, int peer) {
  struct cudaMemAccessDesc d;
  d.location.type = cudaMemLocationTypeDevice;
  d.location.id = peer;
  d.flags = cudaMemAccessFlagsProtReadWrite;
  return cudaMemPoolSetAccess(pool, &d, 1);
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
