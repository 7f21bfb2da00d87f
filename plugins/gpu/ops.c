/* The GPU plugin's resource operations, one set for every kind: allocate and deallocate (by
 * kind: the runtime's malloc, pool, managed or host call, or malloc's for system memory), mem_info,
 * copy and memset on the given stream, stream_wait (an event recorded on one stream, waited on by
 * the other), synchronize, destroy; and the three tables that offer them (with the IPC groups of
 * ipc.c). */
#include "gpu_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>

/* Where new system memory (<gpu>.system) prefers to live, as RMM's sam_headroom_memory_resource
 * decides it: the part that fits in the device's free memory less the headroom prefers the
 * device, the rest the host (nothing is refused: the host takes what the device cannot); then
 * the prefetch (prefetch = true) of the part that prefers the device, on the stream. */
static gpuError_t system_place(const gpu_res *r, void *p, size_t bytes, gpuStream_t s,
                               const char **call) {
  gpuError_t e = gpuSuccess;
  size_t on_device = bytes;
  if (r->headroom) {
    size_t free_b = 0, total = 0;
    *call = GPU_PREFIX "MemGetInfo";
    e = gpuMemGetInfo(&free_b, &total);
    size_t room = free_b > r->headroom ? free_b - r->headroom : 0;
    on_device = (room < bytes ? room : bytes) / GPU_NATIVE_ALIGNMENT * GPU_NATIVE_ALIGNMENT;
    *call = GPU_PREFIX "MemAdvise";
    if (e == gpuSuccess && on_device)
      e = gpu_advise(p, on_device, gpuMemAdviseSetPreferredLocation, r->device);
    if (e == gpuSuccess && bytes > on_device)
      e = gpu_advise((char *)p + on_device, bytes - on_device, gpuMemAdviseSetPreferredLocation,
                     gpuCpuDeviceId);
  }
  if (e == gpuSuccess && r->prefetch && on_device) {
    *call = GPU_PREFIX "MemPrefetchAsync";
    e = gpu_prefetch(p, on_device, r->device, s);
  }
  return e;
}

static int g_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream stream,
                      void **out) {
  gpu_res *r = gpu_host->resource_context(self);
  const char *kind = gpu_kind_names[r->kind];
  *out = NULL;
  if (align > GPU_NATIVE_ALIGNMENT)
    return gpu_host->set_error(
        DEVMM_ENOTSUP,
        "%s: alignment %zu is above the runtime's %d bytes (stack an aligned "
        "adaptor)",
        kind, align, GPU_NATIVE_ALIGNMENT);
  int prev;
  GPU_ENTER(r, prev);
  int rc = gpu_capture_guard(r, stream, "an allocation", /* ADR 38 */
                             r->kind == KIND_ASYNC ? GPU_CAP_ORDERED : GPU_CAP_UNSAFE);
  if (rc) {
    gpu_leave(prev);
    return rc;
  }
  const char *call;
  switch (r->kind) {
  case KIND_ASYNC:
    call = GPU_PREFIX "MallocFromPoolAsync";
    e = gpuMallocFromPoolAsync(out, bytes, r->pool, (gpuStream_t)stream);
    break;
  case KIND_MANAGED:
    call = GPU_PREFIX "MallocManaged";
    e = gpuMallocManaged(out, bytes, gpuMemAttachGlobal);
    if (e == gpuSuccess && r->advise >= 0 &&
        (e = gpu_advise(*out, bytes, (gpuMemoryAdvise)r->advise, r->device)) != gpuSuccess)
      call = GPU_PREFIX "MemAdvise";
    else if (e == gpuSuccess && r->prefetch &&
             (e = gpu_prefetch(*out, bytes, r->device, (gpuStream_t)stream)) != gpuSuccess)
      call = GPU_PREFIX "MemPrefetchAsync";
    if (e != gpuSuccess && *out) {
      gpuFree(*out);
      *out = NULL;
    }
    break;
  case KIND_PINNED:
    call = GPU_PREFIX "HostAlloc";
    e = gpuHostAlloc(out, bytes);
    break;
  case KIND_SYSTEM: /* malloc's memory, which HMM or ATS let the device address */
    call = "posix_memalign";
    if (posix_memalign(out, GPU_NATIVE_ALIGNMENT, bytes) != 0) {
      e = gpuErrorMemoryAllocation;
      break;
    }
    e = system_place(r, *out, bytes, (gpuStream_t)stream, &call);
    if (e != gpuSuccess) {
      gpu_system_freed(*out, bytes);
      free(*out);
    }
    break;
  default: /* isolated: a size CUDA gives a block of its own (ADR 38 §IPC opens) */
    call = GPU_PREFIX "Malloc";
    if (r->kind == KIND_DEVICE)
      gpu_ledger_reap(); /* exported frees that waited for importers' closes */
    e = r->isolate && bytes > SIZE_MAX - GPU_IPC_BLOCK ? gpuErrorMemoryAllocation
        : r->isolate ? gpuMalloc(out, (bytes + GPU_IPC_BLOCK - 1) / GPU_IPC_BLOCK * GPU_IPC_BLOCK)
                     : gpuMalloc(out, bytes);
  }
  gpu_leave(prev);
  if (e != gpuSuccess) {
    *out = NULL;
    return gpu_fail(e, kind, r->device, call, bytes);
  }
  return DEVMM_OK;
}

static int g_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                        devmm_stream stream) {
  (void)align;
  gpu_res *r = gpu_host->resource_context(self);
  int prev;
  GPU_ENTER(r, prev);
  int rc = gpu_capture_guard(r, stream, "a free", /* ADR 38: a deferred free retries */
                             r->kind == KIND_ASYNC ? GPU_CAP_ORDERED : GPU_CAP_UNSAFE);
  if (rc) {
    gpu_leave(prev);
    return rc;
  }
  const char *call;
  switch (r->kind) {
  case KIND_ASYNC:
    call = GPU_PREFIX "FreeAsync";
    e = gpuFreeAsync(ptr, (gpuStream_t)stream);
    break;
  case KIND_PINNED:
    call = GPU_PREFIX "FreeHost";
    e = gpuFreeHost(ptr);
    break;
  case KIND_SYSTEM: /* free(3) once the stream's work on it is done (RMM's frees at once) */
    call = GPU_PREFIX "StreamSynchronize";
    e = gpuStreamSynchronize((gpuStream_t)stream);
    if (e == gpuSuccess) {
      gpu_system_freed(ptr, bytes);
      free(ptr);
    }
    break;
  default: /* exported memory another process maps: freed once it closed (ADR 38) */
    call = GPU_PREFIX "Free";
    e = r->kind == KIND_DEVICE && gpu_ledger_defer_free(r->device, ptr) ? gpuSuccess : gpuFree(ptr);
  }
  gpu_leave(prev);
  return e == gpuSuccess ? DEVMM_OK : gpu_fail(e, gpu_kind_names[r->kind], r->device, call, bytes);
}

/* Page-locked memory is host memory: its free and total bytes are the machine's. */
static int host_mem_info(size_t *free_bytes, size_t *total_bytes) {
  struct sysinfo si;
  if (sysinfo(&si) != 0)
    return gpu_host->set_error(DEVMM_EIO, "%s.pinned: sysinfo failed", GPU_PLUGIN);
  *total_bytes = (size_t)si.totalram * si.mem_unit;
  *free_bytes = (size_t)(si.freeram + si.bufferram) * si.mem_unit;
  FILE *f = fopen("/proc/meminfo", "re");
  if (f) {
    char line[128];
    unsigned long long kb;
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
        *free_bytes = (size_t)kb * 1024;
    fclose(f);
  }
  return DEVMM_OK;
}

static int g_mem_info(devmm_resource *self, size_t *free_bytes, size_t *total_bytes) {
  gpu_res *r = gpu_host->resource_context(self);
  if (r->kind == KIND_PINNED)
    return host_mem_info(free_bytes, total_bytes);
  int prev;
  GPU_ENTER(r, prev);
  e = gpuMemGetInfo(free_bytes, total_bytes);
  gpu_leave(prev);
  return e == gpuSuccess
             ? DEVMM_OK
             : gpu_fail(e, gpu_kind_names[r->kind], r->device, GPU_PREFIX "MemGetInfo", 0);
}

static int g_copy(devmm_resource *self, void *dst, const void *src, size_t n, devmm_stream s) {
  gpu_res *r = gpu_host->resource_context(self);
  int prev;
  GPU_ENTER(r, prev);
  e = gpuMemcpyAsync(dst, src, n, (gpuStream_t)s);
  gpu_leave(prev);
  return e == gpuSuccess
             ? DEVMM_OK
             : gpu_fail(e, gpu_kind_names[r->kind], r->device, GPU_PREFIX "MemcpyAsync", n);
}

static int g_memset(devmm_resource *self, void *dst, int v, size_t n, devmm_stream s) {
  gpu_res *r = gpu_host->resource_context(self);
  int prev;
  GPU_ENTER(r, prev);
  e = gpuMemsetAsync(dst, v, n, (gpuStream_t)s);
  gpu_leave(prev);
  return e == gpuSuccess
             ? DEVMM_OK
             : gpu_fail(e, gpu_kind_names[r->kind], r->device, GPU_PREFIX "MemsetAsync", n);
}

/* Two handles of the same stream (NULL and the legacy handle name one stream). */
static int same_stream(devmm_stream a, devmm_stream b) {
#ifdef gpuStreamLegacy
  if (a == (devmm_stream)gpuStreamLegacy)
    a = NULL;
  if (b == (devmm_stream)gpuStreamLegacy)
    b = NULL;
#endif
  return a == b;
}

static int g_stream_wait(devmm_resource *self, devmm_stream waiter, devmm_stream waitee) {
  gpu_res *r = gpu_host->resource_context(self);
  if (same_stream(waiter, waitee))
    return DEVMM_OK;
  pthread_mutex_lock(&r->event_lock);
  int prev, plan = GPU_WAIT_STREAM;
  gpuError_t e = gpu_enter(r->device, &prev);
  const char *call = GPU_PREFIX "SetDevice";
  int rc = e == gpuSuccess ? gpu_capture_plan_wait(r, waiter, waitee, &plan) : DEVMM_OK;
  if (rc || plan == GPU_WAIT_NONE) { /* a capture's boundary (ADR 38) */
    gpu_leave(prev);
    pthread_mutex_unlock(&r->event_lock);
    return rc;
  }
  if (e == gpuSuccess) {
    /* the event lives on the resource's device, where waitee (the buffer's stream) is */
    call = GPU_PREFIX "EventCreateWithFlags";
    if (!r->has_event &&
        (e = gpuEventCreateWithFlags(&r->event, gpuEventDisableTiming)) == gpuSuccess)
      r->has_event = 1;
    if (e == gpuSuccess) {
      call = GPU_PREFIX "EventRecord";
      e = gpuEventRecord(r->event, (gpuStream_t)waitee);
    }
    if (e == gpuSuccess && plan == GPU_WAIT_HOST) { /* never a wait across a capture */
      call = GPU_PREFIX "EventSynchronize";
      e = gpuEventSynchronize(r->event);
    } else if (e == gpuSuccess) { /* the wait captures the record: it may be recorded again */
      call = GPU_PREFIX "StreamWaitEvent";
      e = gpuStreamWaitEvent((gpuStream_t)waiter, r->event, 0);
    }
    gpu_leave(prev);
  }
  pthread_mutex_unlock(&r->event_lock);
  return e == gpuSuccess ? DEVMM_OK : gpu_fail(e, gpu_kind_names[r->kind], r->device, call, 0);
}

static int g_synchronize(devmm_resource *self, devmm_stream s) {
  gpu_res *r = gpu_host->resource_context(self);
  int prev;
  GPU_ENTER(r, prev);
  int rc = gpu_capture_guard(r, s, s == DEVMM_STREAM_ALL ? "a device synchronize" : "a synchronize",
                             s == DEVMM_STREAM_ALL ? GPU_CAP_UNSAFE : GPU_CAP_WAITS);
  if (rc) {
    gpu_leave(prev);
    return rc;
  }
  const char *call;
  if (s == DEVMM_STREAM_ALL) {
    call = GPU_PREFIX "DeviceSynchronize";
    e = gpuDeviceSynchronize();
  } else {
    call = GPU_PREFIX "StreamSynchronize";
    e = gpuStreamSynchronize((gpuStream_t)s);
  }
  gpu_leave(prev);
  return e == gpuSuccess ? DEVMM_OK : gpu_fail(e, gpu_kind_names[r->kind], r->device, call, 0);
}

/* Managed and system memory move to the device (the prefetch adaptor, devmm_prefetch). */
static int g_prefetch(devmm_resource *self, const void *p, size_t n, devmm_stream s) {
  gpu_res *r = gpu_host->resource_context(self);
  int prev;
  GPU_ENTER(r, prev);
  e = gpu_prefetch(p, n, r->device, (gpuStream_t)s);
  gpu_leave(prev);
  return e == gpuSuccess
             ? DEVMM_OK
             : gpu_fail(e, gpu_kind_names[r->kind], r->device, GPU_PREFIX "MemPrefetchAsync", n);
}

static void g_destroy(devmm_resource *self) {
  gpu_res *r = gpu_host->resource_context(self);
  if (r->has_event) {
    int prev;
    if (gpu_enter(r->device, &prev) == gpuSuccess) {
      gpuEventDestroy(r->event);
      gpu_leave(prev);
    }
  }
  gpu_res_release(r);
}

/* gpu_ops, and gpu_prefetch_ops: the same with prefetch, for memory that moves
 * (<gpu>.managed, .system, and .async with pool = managed). */
#define GPU_OPS                                                                                    \
  .struct_size = sizeof(devmm_resource_ops), .allocate = g_allocate, .deallocate = g_deallocate,   \
  .mem_info = g_mem_info, .copy = g_copy, .memset = g_memset, .stream_wait = g_stream_wait,        \
  .synchronize = g_synchronize, .destroy = g_destroy
const devmm_resource_ops gpu_ops = {GPU_OPS};
const devmm_resource_ops gpu_prefetch_ops = {GPU_OPS, .prefetch = g_prefetch};
#undef GPU_OPS

/* The same operations with an IPC group: the device kind, and async pools made with ipc = true
 * (the core finds a group by the kind written in a handle: one table per kind). */
const devmm_resource_ops gpu_device_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = g_allocate,
    .deallocate = g_deallocate,
    .mem_info = g_mem_info,
    .copy = g_copy,
    .memset = g_memset,
    .stream_wait = g_stream_wait,
    .synchronize = g_synchronize,
    .destroy = g_destroy,
    .ipc = &gpu_ipc_device,
};

const devmm_resource_ops gpu_async_ipc_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = g_allocate,
    .deallocate = g_deallocate,
    .mem_info = g_mem_info,
    .copy = g_copy,
    .memset = g_memset,
    .stream_wait = g_stream_wait,
    .synchronize = g_synchronize,
    .destroy = g_destroy,
    .ipc = &gpu_ipc_async,
};
