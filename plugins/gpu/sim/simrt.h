/* The simulated accelerator runtime behind devmm-sim (backend.h maps the GPU plugin's
 * vocabulary onto it; the runtime's files share simrt_internal.h). It implements, on the CPU,
 * the subset of a CUDA-runtime-like API that the GPU plugin (plugins/gpu/) calls, with the rules
 * a real runtime enforces:
 *
 *  - device memory is a PROT_NONE view of a memfd: the host faults on any touch; the runtime's
 *    copies, memsets and kernels reach the bytes through a second, private mapping;
 *  - every stream is a queue run by its own worker thread, with a seeded random delay before
 *    each operation; handle 0/1 is the legacy default stream of the current device (it waits
 *    for every blocking stream of its device, and they wait for it), 2 the calling thread's
 *    per-thread default stream;
 *  - events belong to the device current at creation; recording one on another device's stream
 *    is simErrorInvalidResourceHandle, as in CUDA; a wait holds the record made before its
 *    call; destroyed streams and events are detected;
 *  - a stream-ordered free poisons the bytes with 0xDD when it executes; an allocation ordered
 *    on the stream the free is queued on may take any block of the pool that fits at once
 *    (stream order makes that legal, as in CUDA's pools), other streams only after the free ran
 *    and a random delay; the pool keeps freed blocks (used, to MemGetInfo) until a synchronize
 *    trims it to its release threshold; fresh allocations hold 0xCD;
 *  - a memset or kernel on device A's stream may not touch device B's memory without peer
 *    access, nor a pool's memory without the pool's access; nor pageable host memory (unless
 *    the devices address it: simDevAttrPageableMemoryAccess, [plugin sim] pageable_access),
 *    which a copy stages at the call (from it) or waits for (to it);
 *  - sticky errors fail every later call; a kernel's fault is reported by the next call.
 * Never presented as CUDA: every name here is sim*. */
#ifndef DEVMM_SIMRT_H
#define DEVMM_SIMRT_H

#include <stddef.h>
#include <stdint.h>

typedef enum simError {
  simSuccess = 0,
  simErrorInvalidValue = 1,
  simErrorMemoryAllocation = 2,
  simErrorInitializationError = 3,
  simErrorInsufficientDriver = 35,
  simErrorNoDevice = 100,
  simErrorInvalidDevice = 101,
  simErrorInvalidContext = 201,        /* a driver-level call on a thread with no context */
  simErrorMapBufferObjectFailed = 205, /* an IPC handle opens nothing: CUDA's generic error */
  simErrorInvalidResourceHandle = 400,
  simErrorIllegalState = 401,
  simErrorNotReady = 600,
  simErrorIllegalAddress = 700, /* an imported mapping whose exporter freed it */
  simErrorPeerAccessAlreadyEnabled = 704,
  simErrorPeerAccessNotEnabled = 705,
  simErrorNotSupported = 801,
  simErrorStreamCaptureUnsupported = 900, /* an unsafe call while a capture forbids it */
  simErrorStreamCaptureInvalidated = 901, /* the capture was invalidated by such a call */
  simErrorStreamCaptureUnmatched = 903,   /* ended on another stream than it began on */
  simErrorStreamCaptureIsolation = 905,   /* a dependency across the capture's boundary */
  simErrorStreamCaptureImplicit = 906,    /* the legacy stream while a capture forbids it */
  simErrorCapturedEvent = 907,            /* a host wait on an event recorded in a capture */
  simErrorStreamCaptureWrongThread = 908, /* ended on another thread than it began on */
  simErrorUnknown = 999,
} simError_t;

typedef struct simStream *simStream_t;
typedef struct simEvent *simEvent_t;
typedef struct simMemPool *simMemPool_t;

#define simStreamLegacy ((simStream_t)(uintptr_t)1)
#define simStreamPerThread ((simStream_t)(uintptr_t)2)
#define simStreamDefault 0u
#define simStreamNonBlocking 1u
#define simEventDefault 0u
#define simEventDisableTiming 2u
#define simMemAttachGlobal 1u
#define simHostAllocDefault 0u
#define simHostAllocPortable 1u /* pinned for every device, not only the allocating one */
#define simMemcpyDefault 4

typedef struct simDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major, minor;
} simDeviceProp;

enum { simMemAllocationTypePinned = 1, simMemAllocationTypeManaged = 2 };
enum { simMemHandleTypeNone = 0 };
enum { simMemLocationTypeDevice = 1 };
typedef struct simMemPoolProps {
  int allocType;
  int handleTypes;
  struct {
    int type;
    int id;
  } location;
  size_t maxSize;
} simMemPoolProps;

typedef enum simMemPoolAttr { simMemPoolAttrReleaseThreshold = 4 } simMemPoolAttr;
typedef enum simMemoryAdvise {
  simMemAdviseSetReadMostly = 1,
  simMemAdviseSetPreferredLocation = 3,
  simMemAdviseSetAccessedBy = 5,
} simMemoryAdvise;

const char *simGetErrorString(simError_t e);
const char *simGetErrorName(simError_t e);
simError_t simRuntimeGetVersion(int *v);
simError_t simGetDeviceCount(int *n);
simError_t simGetDeviceProperties(simDeviceProp *p, int device);
simError_t simGetDevice(int *device);
simError_t simSetDevice(int device);
/* Contexts, as CUDA's primary contexts: a thread has none bound until SetDevice, a malloc, a
 * copy or a memset binds the current device's (GetDevice does not); the driver-level calls
 * (MemGetAddressRange, the IPC calls) on a thread with none fail with simErrorInvalidContext.
 * *device: the device of the calling thread's bound context, or -1 (cuCtxGetCurrent). */
simError_t simCtxGetCurrent(int *device);
/* Contexts as handles (access.c), as the driver's: a context of a device's own, not its primary
 * one (cuCtxCreate: bound to the calling thread), the calling thread's bound context (NULL:
 * none; a primary context has a handle too) and binding one (NULL: none). simSetDevice binds the
 * device's primary context, replacing whatever was bound, as cudaSetDevice does. */
typedef struct simCtx *simCtx_t;
simError_t simCtxCreate(simCtx_t *ctx, unsigned flags, int device);
simError_t simCtxGetCurrentHandle(simCtx_t *ctx);
simError_t simCtxSetCurrent(simCtx_t ctx);
simError_t simDeviceSynchronize(void);
simError_t simMemGetInfo(size_t *free_bytes, size_t *total_bytes);
/* Device attributes, as cudaDeviceGetAttribute: PageableMemoryAccess is 1 where [plugin sim]
 * pageable_access = true (HMM or ATS on a real machine: work of the device, memsets, kernels,
 * advice and prefetches, then reach host memory the runtime did not allocate), else 0. */
typedef enum simDeviceAttr { simDevAttrPageableMemoryAccess = 88 } simDeviceAttr;
simError_t simDeviceGetAttribute(int *value, simDeviceAttr attr, int device);
/* The host as a location (simMemAdvise's preferred location, simMemPrefetchAsync). */
#define simCpuDeviceId (-1)

simError_t simMalloc(void **p, size_t n);
simError_t simFree(void *p);
simError_t simMallocManaged(void **p, size_t n, unsigned flags);
simError_t simHostAlloc(void **p, size_t n, unsigned flags);
simError_t simFreeHost(void *p);
simError_t simMemAdvise(const void *p, size_t n, simMemoryAdvise advice, int device);
simError_t simMemPrefetchAsync(const void *p, size_t n, int device, simStream_t s);

simError_t simDeviceGetDefaultMemPool(simMemPool_t *pool, int device);
/* The default pool of device for an allocation type (as CUDA 13's cudaMemGetDefaultMemPool):
 * simMemAllocationTypeManaged gives the device's managed pool, whose allocations are managed
 * memory (host-accessible, reached by every device), freed in stream order as a pool's are. */
simError_t simMemGetDefaultMemPool(simMemPool_t *pool, int device, int allocType);
simError_t simMemPoolCreate(simMemPool_t *pool, const simMemPoolProps *props);
simError_t simMemPoolDestroy(simMemPool_t pool);
simError_t simMemPoolSetAttribute(simMemPool_t pool, simMemPoolAttr attr, void *value);
simError_t simMemPoolGetAttribute(simMemPool_t pool, simMemPoolAttr attr, void *value);
simError_t simMallocFromPoolAsync(void **p, size_t n, simMemPool_t pool, simStream_t s);
simError_t simFreeAsync(void *p, simStream_t s);

/* Host memory the runtime did not allocate is pageable (so is pinned memory allocated without
 * simHostAllocPortable, for every device but the one current at its allocation), as in CUDA: a
 * copy from it is staged at the call (the caller may overwrite it once the call returns), a copy
 * to it returns only once done, and a memset or kernel on it is refused (simErrorInvalidValue). */
simError_t simMemcpyAsync(void *dst, const void *src, size_t n, int kind, simStream_t s);
simError_t simMemsetAsync(void *dst, int value, size_t n, simStream_t s);
/* A "kernel": fn(user) runs on the stream's worker, in stream order; it reaches device bytes
 * through simDeviceView. */
simError_t simLaunchHostFunc(simStream_t s, void (*fn)(void *), void *user);
/* The runtime's private address for [p, p+n): device memory of the kernel's own device (or of
 * any device on the host), managed and pinned memory as they are; NULL otherwise. */
void *simDeviceView(const void *p, size_t n);

/* What a launch checks of a kernel's pointer argument [p, p+n): memory that work of the stream's
 * device may reach (access.c), else simErrorInvalidValue. */
simError_t simKernelArgument(simStream_t s, const void *p, size_t n);

/* Access between devices (access.c), as in CUDA: work of device d (a memset or kernel on its
 * stream) reaches its own memory, managed memory, portable pinned memory and pinned memory
 * allocated while d was current; another device's memory only once d enabled peer access to it
 * (simDeviceEnablePeerAccess with d current); and memory of a pool (default or not) only where
 * the pool grants d access (simMemPoolSetAccess: a pool's memory does not follow peer access).
 * Copies between devices need neither. */
typedef struct simMemAccessDesc {
  struct {
    int type, id;
  } location;
  int flags; /* simMemAccessFlagsProt* */
} simMemAccessDesc;
enum {
  simMemAccessFlagsProtNone = 0,
  simMemAccessFlagsProtRead = 1,
  simMemAccessFlagsProtReadWrite = 3
};
simError_t simDeviceCanAccessPeer(int *can, int device, int peer);
simError_t simDeviceEnablePeerAccess(int peer, unsigned flags);
simError_t simDeviceDisablePeerAccess(int peer);
simError_t simMemPoolSetAccess(simMemPool_t pool, const simMemAccessDesc *desc, size_t count);

simError_t simStreamCreateWithFlags(simStream_t *s, unsigned flags);
simError_t simStreamDestroy(simStream_t s);
simError_t simStreamSynchronize(simStream_t s);
simError_t simStreamWaitEvent(simStream_t s, simEvent_t e, unsigned flags);
simError_t simEventCreateWithFlags(simEvent_t *e, unsigned flags);
simError_t simEventRecord(simEvent_t e, simStream_t s);
simError_t simEventSynchronize(simEvent_t e);
simError_t simEventDestroy(simEvent_t e);

/* Stream capture, as cudaStreamBeginCapture does it: work queued on a capturing stream is not
 * run but recorded into a graph, which simStreamEndCapture returns and simGraphLaunch runs. While
 * a capture is active some calls are unsafe: simMalloc, simFree, simMallocManaged, simHostAlloc,
 * simFreeHost, simDeviceSynchronize (simErrorStreamCaptureUnsupported) and any use of the legacy
 * stream of the capture's device (simErrorStreamCaptureImplicit). Whether a thread may make them
 * follows CUDA's rules (cudaThreadExchangeStreamCaptureMode): a global capture forbids them to
 * every thread whose own mode is global, a thread-local one only to the capturing thread, a
 * relaxed one to nobody; a thread in relaxed mode is never forbidden. A forbidden call fails and
 * invalidates the capture: its end reports simErrorStreamCaptureInvalidated and gives no graph.
 * Waiting inside a capture on an event recorded outside it is simErrorStreamCaptureIsolation, a
 * host wait on a captured event simErrorCapturedEvent, synchronising a capturing stream
 * simErrorStreamCaptureUnsupported (each invalidates too). A stream that waits on an event
 * recorded in a capture joins it. Stream-ordered allocation inside a capture (graph memory
 * nodes) is not modelled: simMallocFromPoolAsync and simFreeAsync on a capturing stream are
 * simErrorStreamCaptureUnsupported. */
typedef struct simGraph *simGraph_t;
typedef enum simStreamCaptureMode {
  simStreamCaptureModeGlobal = 0,
  simStreamCaptureModeThreadLocal = 1,
  simStreamCaptureModeRelaxed = 2,
} simStreamCaptureMode;
typedef enum simStreamCaptureStatus {
  simStreamCaptureStatusNone = 0,
  simStreamCaptureStatusActive = 1,
  simStreamCaptureStatusInvalidated = 2,
} simStreamCaptureStatus;
simError_t simStreamBeginCapture(simStream_t s, simStreamCaptureMode mode);
simError_t simStreamEndCapture(simStream_t s, simGraph_t *graph);
/* The legacy stream while a blocking stream of its device captures: simErrorStreamCaptureImplicit
 * (as in CUDA). */
simError_t simStreamIsCapturing(simStream_t s, simStreamCaptureStatus *status);
simError_t simStreamGetCaptureInfo(simStream_t s, simStreamCaptureStatus *status,
                                   unsigned long long *id);
simError_t simThreadExchangeStreamCaptureMode(simStreamCaptureMode *mode);
simError_t simGraphLaunch(simGraph_t g, simStream_t s);
simError_t simGraphDestroy(simGraph_t g);

/* Sharing device memory with another process, as cudaIpc* does: a 64-byte handle names a live
 * allocation (the device's memfd, which the runtime keeps open, its offset, the exporter's pid
 * and an export tag); opening it maps the allocation's whole 2 MiB chunk (or chunks) into this
 * process as device memory of the same device number (PROT_NONE to the host, reached through a
 * private view), as CUDA maps the whole block of a sub-allocated allocation: an allocation whose
 * size is a multiple of 2 MiB starts a chunk of its own, smaller ones share chunks. CUDA's rules:
 *  - a handle opened in the process that exported it: simErrorInvalidContext;
 *  - repeated opens of one handle in a process return the same pointer, counted: each needs a
 *    close, the last one unmaps;
 *  - an exporter that has freed the allocation or exited: simErrorMapBufferObjectFailed (the
 *    generic error CUDA gives; simIpcReason says which);
 *  - an exporter's free while an importer still maps it (undefined in CUDA) is a loud fault:
 *    the importer's next copy, memset or kernel on it and its close fail with
 *    simErrorIllegalAddress, and the runtime says so on stderr once per mapping.
 * simIpcReason(): why the calling thread's last failed IPC call failed. */
typedef struct simIpcMemHandle {
  unsigned char reserved[64];
} simIpcMemHandle_t;
simError_t simIpcGetMemHandle(simIpcMemHandle_t *handle, void *p);
/* The base and size of the live allocation containing p (as cuMemGetAddressRange), or of the
 * exported allocation an imported mapping holds (the rest of its chunk: the whole mapping). */
simError_t simMemGetAddressRange(void **base, size_t *size, void *p);
simError_t simIpcOpenMemHandle(void **p, simIpcMemHandle_t handle, unsigned flags);
simError_t simIpcCloseMemHandle(void *p);
const char *simIpcReason(void);

/* Runtime-wide settings (the plugin's [plugin sim] options): devices (1..16), bytes of memory
 * per device, jitter_us (the largest random delay before each stream operation), seed. Fails
 * with simErrorNotReady when the device count or memory would change while device memory or
 * user streams are live. */
simError_t simConfigure(int devices, size_t memory, unsigned jitter_us, uint64_t seed);
/* [plugin sim] pageable_access: what simDevAttrPageableMemoryAccess answers (default 0). */
void simConfigurePageableAccess(int on);
/* The preferred location that the last simMemAdvise(SetPreferredLocation) covering pageable p
 * gave (a device, or simCpuDeviceId); 0, or simErrorInvalidValue when none did. */
simError_t simPreferredLocation(const void *p, int *location);
/* [p, p+n) of pageable memory was freed (free(3)): its advice goes, as the kernel's does when
 * the pages are unmapped (a real runtime needs no call: the simulator keeps the advice itself). */
void simHostFreed(const void *p, size_t n);

#endif
