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
 *    is simErrorInvalidResourceHandle, as in CUDA; destroyed streams and events are detected;
 *  - a stream-ordered free poisons the bytes with 0xDD when it executes and the block is reused
 *    only after a random delay, except by an allocation of the same size ordered on the stream
 *    the free is queued on, which may take it at once (stream order makes that legal, as in
 *    CUDA's pools); fresh allocations hold 0xCD;
 *  - a memset or kernel on device A's stream may not touch device B's memory.
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
  simErrorInvalidResourceHandle = 400,
  simErrorNotReady = 600,
  simErrorNotSupported = 801,
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
#define simMemcpyDefault 4

typedef struct simDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major, minor;
} simDeviceProp;

enum { simMemAllocationTypePinned = 1 };
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
simError_t simDeviceSynchronize(void);
simError_t simMemGetInfo(size_t *free_bytes, size_t *total_bytes);

simError_t simMalloc(void **p, size_t n);
simError_t simFree(void *p);
simError_t simMallocManaged(void **p, size_t n, unsigned flags);
simError_t simHostAlloc(void **p, size_t n, unsigned flags);
simError_t simFreeHost(void *p);
simError_t simMemAdvise(const void *p, size_t n, simMemoryAdvise advice, int device);
simError_t simMemPrefetchAsync(const void *p, size_t n, int device, simStream_t s);

simError_t simDeviceGetDefaultMemPool(simMemPool_t *pool, int device);
simError_t simMemPoolCreate(simMemPool_t *pool, const simMemPoolProps *props);
simError_t simMemPoolDestroy(simMemPool_t pool);
simError_t simMemPoolSetAttribute(simMemPool_t pool, simMemPoolAttr attr, void *value);
simError_t simMemPoolGetAttribute(simMemPool_t pool, simMemPoolAttr attr, void *value);
simError_t simMallocFromPoolAsync(void **p, size_t n, simMemPool_t pool, simStream_t s);
simError_t simFreeAsync(void *p, simStream_t s);

simError_t simMemcpyAsync(void *dst, const void *src, size_t n, int kind, simStream_t s);
simError_t simMemsetAsync(void *dst, int value, size_t n, simStream_t s);
/* A "kernel": fn(user) runs on the stream's worker, in stream order; it reaches device bytes
 * through simDeviceView. */
simError_t simLaunchHostFunc(simStream_t s, void (*fn)(void *), void *user);
/* The runtime's private address for [p, p+n): device memory of the kernel's own device (or of
 * any device on the host), managed and pinned memory as they are; NULL otherwise. */
void *simDeviceView(const void *p, size_t n);

simError_t simStreamCreateWithFlags(simStream_t *s, unsigned flags);
simError_t simStreamDestroy(simStream_t s);
simError_t simStreamSynchronize(simStream_t s);
simError_t simStreamWaitEvent(simStream_t s, simEvent_t e, unsigned flags);
simError_t simEventCreateWithFlags(simEvent_t *e, unsigned flags);
simError_t simEventRecord(simEvent_t e, simStream_t s);
simError_t simEventSynchronize(simEvent_t e);
simError_t simEventDestroy(simEvent_t e);

/* Sharing device memory with another process, as cudaIpc* does: a 64-byte handle names the
 * start of a live allocation (the device's memfd, which the runtime keeps open, an offset and
 * the exporter's pid); opening it maps the same bytes into this process as device memory of the
 * same device number (PROT_NONE to the host, reached through a private view); closing unmaps it.
 * An exporter's free poisons the bytes with 0xDD, which an importer still mapping them sees.
 * simIpcReason(): why the calling thread's last failed open failed. */
typedef struct simIpcMemHandle {
  unsigned char reserved[64];
} simIpcMemHandle_t;
simError_t simIpcGetMemHandle(simIpcMemHandle_t *handle, void *p);
/* The base and size of the live allocation containing p (as cuMemGetAddressRange). */
simError_t simMemGetAddressRange(void **base, size_t *size, void *p);
simError_t simIpcOpenMemHandle(void **p, simIpcMemHandle_t handle, unsigned flags);
simError_t simIpcCloseMemHandle(void *p);
const char *simIpcReason(void);

/* Runtime-wide settings (the plugin's [plugin sim] options): devices (1..16), bytes of memory
 * per device, jitter_us (the largest random delay before each stream operation), seed. Fails
 * with simErrorNotReady when the device count or memory would change while device memory or
 * user streams are live. */
simError_t simConfigure(int devices, size_t memory, unsigned jitter_us, uint64_t seed);

#endif
