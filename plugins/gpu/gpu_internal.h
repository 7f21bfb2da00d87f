/* The GPU plugin's internals, shared by its files (plugin.c: the entry and descriptor;
 * devices.c; ops.c; ipc.c; kinds.c). Each build of the plugin puts one runtime's backend.h
 * (cuda/, rocm/, sim/) on the include path: it maps the gpuX vocabulary used here onto that
 * runtime, and may set the GPU_* switches below. */
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
#ifndef GPU_DEVICE_COUNT_VARIES
#define GPU_DEVICE_COUNT_VARIES 0
#endif

/* The host table devmm passed at the entry (plugin.c). */
extern const devmm_host_services *gpu_host;

/* ------------------------------------------------------------------ kinds and resources */

enum { KIND_DEVICE, KIND_ASYNC, KIND_MANAGED, KIND_PINNED };
/* "<gpu>.device", ".async", ".managed", ".pinned", indexed by KIND_* (plugin.c). */
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
  int pool_fd; /* its descriptor (GPU_HAS_POOL_IPC), -1 if none */
} gpu_res;

/* kinds.c: frees a resource's pool (if its own), pool descriptor, lock and record: what create
 * made (g_destroy destroys the event first). */
void gpu_res_release(gpu_res *r);

/* The kinds (kinds.c), in the descriptor's order. */
extern const devmm_resource_kind gpu_device_kind, gpu_async_kind, gpu_managed_kind, gpu_pinned_kind;

/* The resource ops (ops.c): plain, and with the IPC group of <gpu>.device or of <gpu>.async
 * pools made with ipc = true (the core finds a group by the kind written in a handle: one table
 * per kind). */
extern const devmm_resource_ops gpu_ops, gpu_device_ops, gpu_async_ipc_ops;
/* Those IPC groups (ipc.c). */
extern const devmm_resource_ipc_ops gpu_ipc_device, gpu_ipc_async;

/* ------------------------------------------------------------------ errors and devices
 * (devices.c) */

/* Sets devmm's error for a failed runtime call (DEVMM_ENOMEM for an allocation failure, else
 * DEVMM_EDEVICE) and returns the status: "<kind> on <gpu>:<device>: <call>(<arg>) failed: ...". */
int gpu_fail(gpuError_t e, const char *kind, int device, const char *call, size_t arg);
/* The descriptor's device_count and device_info. */
int gpu_device_count(size_t *count);
int gpu_device_info(size_t index, devmm_device_info *out);
/* DEVMM_OK if device id exists; else an error naming kind and why (0 devices: the reason). */
int gpu_check_device(const char *kind, int32_t id);
/* Makes `device` current for the calling thread; *prev is the device to restore (-1: none). */
gpuError_t gpu_enter(int device, int *prev);
/* Restores the device gpu_enter replaced (nothing to report if that fails). */
void gpu_leave(int prev);

/* Declares `e` and makes the resource's device current, or returns the failure. */
#define GPU_ENTER(r, prev)                                                                         \
  gpuError_t e = gpu_enter((r)->device, &(prev));                                                  \
  if (e != gpuSuccess)                                                                             \
  return gpu_fail(e, gpu_kind_names[(r)->kind], (r)->device, GPU_PREFIX "SetDevice",               \
                  (size_t)(r)->device)

#endif
