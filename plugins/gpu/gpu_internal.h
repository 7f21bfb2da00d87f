/* The GPU plugin's internals, shared by its files (plugin.c: the entry and descriptor;
 * devices.c; ops.c; ipc.c; ipc_ledger.c; kinds.c). Each build of the plugin puts one runtime's
 * backend.h (cuda/, rocm/, sim/) on the include path: it maps the gpuX vocabulary used here onto
 * that runtime, and may set the GPU_* switches below. */
#ifndef DEVMM_PLUGINS_GPU_INTERNAL_H
#define DEVMM_PLUGINS_GPU_INTERNAL_H

#include <devmm/ipc.h>
#include <devmm/plugin.h>

#include <pthread.h>
#include <stddef.h>

#include "backend.h"

#ifndef GPU_CONFIGURE /* plugin-wide options: only the simulator has some */
#define GPU_PLUGIN_OPTIONS NULL
#define GPU_CONFIGURE NULL
#define GPU_ON_ENTRY(h) ((void)(h))
#endif
#ifndef GPU_HAS_IPC
#define GPU_HAS_IPC 0
#endif
#ifndef GPU_HAS_POOL_IPC
#define GPU_HAS_POOL_IPC 0
#endif
#ifndef GPU_POOL_IPC_WHY /* why a runtime with pools cannot share them, for the message */
#define GPU_POOL_IPC_WHY ""
#endif
#ifndef GPU_RUNTIME_VERSION_AT_FIRST_USE /* 1: naming the runtime's version loads it (HIP) */
#define GPU_RUNTIME_VERSION_AT_FIRST_USE 0
#endif
#ifndef GPU_HAS_CONTEXTS /* gpuCtx_t, gpu_ctx_current and gpu_ctx_set (devices.c) */
#define GPU_HAS_CONTEXTS 0
#endif
#ifndef GPU_HAS_POOL_ACCESS /* gpu_pool_grant and gpuDeviceCanAccessPeer (kinds.c) */
#define GPU_HAS_POOL_ACCESS 0
#endif
#ifndef GPU_MANAGED_POOL_WHY /* why a build has no managed pools, for the message */
#define GPU_MANAGED_POOL_WHY ""
#endif
#if !GPU_HAS_MANAGED_POOL /* stand-ins where kinds.c refuses pool = managed at parse time */
static inline gpuError_t gpu_default_managed_pool(gpuMemPool_t *pool, int device) {
  (void)pool, (void)device;
  return gpuErrorMemoryAllocation;
}
static inline int gpu_managed_pool_unsupported(char *why, size_t cap) {
  (void)why, (void)cap;
  return 0;
}
#endif
#ifndef GPU_DEVICE_COUNT_VARIES
#define GPU_DEVICE_COUNT_VARIES 0
#endif

/* The host table devmm passed at the entry (plugin.c). */
extern const devmm_host_services *gpu_host;

/* ------------------------------------------------------------------ kinds and resources */

enum { KIND_DEVICE, KIND_ASYNC, KIND_MANAGED, KIND_PINNED, KIND_SYSTEM };
/* CUDA's IPC granule: a sub-allocated allocation is shared as its whole 2 MiB block */
#define GPU_IPC_BLOCK ((size_t)2 << 20)
/* "<gpu>.device", ".async", ".managed", ".pinned", ".system", indexed by KIND_* (plugin.c). */
extern const char *const gpu_kind_names[];

typedef struct {
  int kind, device;
  gpuMemPool_t pool;
  int own_pool;
  int advise; /* -1: none */
  int prefetch;
  pthread_mutex_t event_lock; /* one event per resource, recorded and waited on under it */
  gpuEvent_t event;
  int has_event;
  int ipc;     /* an own pool made shareable (ipc = true) */
  int isolate; /* <gpu>.device: each allocation a 2 MiB block of its own (ipc_isolate, ADR 38) */
  int pool_fd; /* its descriptor (GPU_HAS_POOL_IPC), -1 if none */
  int view;    /* <gpu>.async with pool = <address>: a pool another library owns, never destroyed */
  int managed_pool; /* <gpu>.async with pool = managed: the device's pool of managed memory */
  size_t headroom;  /* <gpu>.system: device memory its advice leaves free (RMM's SAM headroom) */
} gpu_res;

/* kinds.c: frees a resource's pool (if its own), pool descriptor, lock and record: what create
 * made (g_destroy destroys the event first). */
void gpu_res_release(gpu_res *r);

/* The kinds (kinds.c), in the descriptor's order. */
extern const devmm_resource_kind gpu_device_kind, gpu_async_kind, gpu_managed_kind, gpu_pinned_kind,
    gpu_system_kind;

/* The resource ops (ops.c): plain, and with the IPC group of <gpu>.device or of <gpu>.async
 * pools made with ipc = true (the core finds a group by the kind written in a handle: one table
 * per kind). */
extern const devmm_resource_ops gpu_ops, gpu_device_ops, gpu_async_ipc_ops;
/* With the prefetch op: <gpu>.managed, .system, .async with pool = managed (ops.c). */
extern const devmm_resource_ops gpu_prefetch_ops;
/* Those IPC groups (ipc.c). */
extern const devmm_resource_ipc_ops gpu_ipc_device, gpu_ipc_async;

/* The IPC ledger (ipc_ledger.c, ADR 38): an exporter's free of <gpu>.device memory that another
 * process maps waits until it closed. */
struct ipcfd_ref;
#define GPU_LEDGER_LAYOUT 2 /* 2: holder words of (pid, start time) per slot (ADR 44); 0: none */
#if GPU_HAS_IPC
/* The slot of an exported allocation (made on its first export): ref names it, gen its
 * generation, layout the ledger's (ADR 44); 0, or -1 when there is no ledger (none: no hold). */
int gpu_ledger_export(int device, void *base, struct ipcfd_ref *ref, uint32_t *gen,
                      uint32_t *layout);
/* 1 if the free of ptr (device current) is deferred because an importer maps it; 0: free it. */
int gpu_ledger_defer_free(int device, void *ptr);
/* Does the deferred frees no importer needs any more (one atomic load when there are none). */
void gpu_ledger_reap(void);
/* Whether the owner freed the allocation at base (its runtime free waits for importers). */
int gpu_ledger_freed(int device, const void *base);
/* An importer's first open of a slot: its hold (this process's holder word, ADR 44, or the
 * anonymous count); the token for gpu_ledger_leave, or NULL. */
void *gpu_ledger_join(const struct ipcfd_ref *ref, int32_t pid, uint32_t gen, uint32_t layout);
/* An importer's last close of what gpu_ledger_join counted (NULL: nothing). */
void gpu_ledger_leave(void *joined);
#else
static inline int gpu_ledger_defer_free(int device, void *ptr) {
  (void)device, (void)ptr;
  return 0;
}
static inline void gpu_ledger_reap(void) {}
#endif

/* ------------------------------------------------------------------ errors and devices
 * (devices.c) */

/* Sets devmm's error for a failed runtime call (DEVMM_ENOMEM for an allocation failure,
 * DEVMM_ESTATE for a stream-capture error (ADR 38), else DEVMM_EDEVICE) and returns the
 * status: "<kind> on <gpu>:<device>: <call>(<arg>) failed: ...". */
int gpu_fail(gpuError_t e, const char *kind, int device, const char *call, size_t arg);
/* The descriptor's device_count (plugin.c, over gpu_count: devices.c) and device_info. */
int gpu_device_count(size_t *count);
int gpu_count(size_t *count);
int gpu_device_info(size_t index, devmm_device_info *out);
/* DEVMM_OK if device id exists; else an error naming kind and why (0 devices: the reason). */
int gpu_check_device(const char *kind, int32_t id);
/* Makes `device` current for the calling thread; *prev is the device to restore (-1: none).
 * In a child forked after the runtime's first use it calls nothing and returns
 * GPU_ERROR_INITIALIZATION, which gpu_fail explains (fork, and the start methods to use). */
gpuError_t gpu_enter(int device, int *prev);
/* The runtimes' "initialization error": cudaErrorInitializationError, hipErrorNotInitialized and
 * simErrorInitializationError are all 3. */
#define GPU_ERROR_INITIALIZATION ((gpuError_t)3)
/* Registers the fork handler that notes a fork after the runtime's first use (the plugin's
 * entry: it calls no runtime). */
void gpu_process_init(void);
/* Restores the device gpu_enter replaced (nothing to report if that fails). */
void gpu_leave(int prev);

/* ------------------------------------------------------------------ graph capture (capture.c,
 * ADR 38; the backend's gpu_capture_status asks the runtime) */

/* Whether stream (not the legacy stream) captures; one seen capturing is remembered until it
 * stops, so that gpu_capture_guard sees its capture from any thread. */
int gpu_stream_capturing(devmm_stream stream);
/* DEVMM_OK, or DEVMM_ESTATE saying why `what` (a call CUDA forbids during a capture: malloc,
 * free, a device synchronize, the legacy stream) is refused: stream captures, a blocking stream
 * of the current device captures, or a stream the plugin saw capturing still does. Call it
 * with the resource's device current. */
enum {
  GPU_CAP_UNSAFE,  /* malloc, free, device synchronize: refused while any known capture runs */
  GPU_CAP_ORDERED, /* ordered on stream: refused on the legacy stream while a stream devmm
                      saw captures (the legacy stream is not asked: the hot path) */
  GPU_CAP_WAITS,   /* a host wait on stream (refused if it captures; legacy: as UNSAFE) */
};
int gpu_capture_guard(const gpu_res *r, devmm_stream stream, const char *what, int use);
/* How stream_wait orders waiter after waitee at a capture's boundary (device current):
 * GPU_WAIT_STREAM as usual (an event recorded on waitee, waited on by waiter), GPU_WAIT_HOST
 * (the event waited on by the host: waiter captures, or is the legacy stream while a capture
 * runs), GPU_WAIT_NONE (waiter captures and waitee is the legacy stream, which a blocking
 * stream's capture makes unusable: the graph's launch on it orders after it); DEVMM_ESTATE for
 * what cannot be ordered. */
enum { GPU_WAIT_STREAM, GPU_WAIT_HOST, GPU_WAIT_NONE };
int gpu_capture_plan_wait(const gpu_res *r, devmm_stream waiter, devmm_stream waitee, int *plan);
/* Whether the plugin knows of a capture underway (as gpu_capture_guard sees it). */
int gpu_capture_known(void);

/* Declares `e` and makes the resource's device current, or returns the failure. */
#define GPU_ENTER(r, prev)                                                                         \
  gpuError_t e = gpu_enter((r)->device, &(prev));                                                  \
  if (e != gpuSuccess)                                                                             \
  return gpu_fail(e, gpu_kind_names[(r)->kind], (r)->device, GPU_PREFIX "SetDevice",               \
                  (size_t)(r)->device)

#endif
