/* The GPU plugins: one implementation, built three times — devmm-cuda against the CUDA runtime
 * (plugins/cuda/backend.h), devmm-rocm against HIP (plugins/rocm/backend.h) and devmm-sim
 * against the simulated runtime (plugins/sim/backend.h), whose tests therefore exercise this
 * file. Every call is a real runtime call; without a driver or device the plugin still loads
 * and reports "0 devices: <runtime's reason>", and creating a resource fails with that reason.
 *
 *   <gpu>.device   cudaMalloc / hipMalloc (synchronous)
 *   <gpu>.async    cudaMallocFromPoolAsync on the device's default pool or a pool of its own
 *                  (options pool = default|own; release_threshold and max_pool_size need an
 *                  own pool: the default pool is shared by the whole process)
 *   <gpu>.managed  cudaMallocManaged (options advise = none|read_mostly|preferred_location|
 *                  accessed_by, prefetch = true|false)
 *   <gpu>.pinned   cudaHostAlloc / hipHostMalloc: page-locked host memory (DLPack CUDAHost)
 * Copy, memset (async on the given stream), stream_wait (event record + wait) and synchronize
 * are offered by every kind. IPC (ADR 30): <gpu>.device shares its allocations through the
 * runtime's IPC handles, <gpu>.async with pool = own and ipc = true through a shareable pool
 * (CUDA only); the other kinds, and ROCm, answer DEVMM_ENOTSUP saying so. Every call runs with the
 * resource's device current, so a NULL stream is always that device's default stream, and a failed
 * device switch is an error. */
#include <devmm/ipc.h>
#include <devmm/plugin.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/sysinfo.h>

#include "backend.h"

#include "../ipc_fd.h"

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
#ifndef GPU_HAS_DRIVER_CHECK /* whether a failed device count means "no driver at all" */
static int gpu_driver_missing(gpuError_t e, char *why, size_t cap) {
  (void)e, (void)why, (void)cap;
  return 0;
}
#endif

static const devmm_host_services *host;

/* ------------------------------------------------------------------ errors and devices */

static int fail(gpuError_t e, const char *kind, int device, const char *call, size_t arg) {
  int status = e == gpuErrorMemoryAllocation ? DEVMM_ENOMEM : DEVMM_EDEVICE;
  return host->set_error(status, "%s%s on %s:%d: %s(%zu) failed: %s (%s)",
                         status == DEVMM_ENOMEM ? "out of memory: " : "", kind, GPU_PLUGIN, device,
                         call, arg, gpuGetErrorString(e), gpuGetErrorName(e));
}

/* The device count, or an error saying why there is none (cached: it does not change; the
 * simulator's is configurable, so it asks every time). */
static int count_devices(int *n) {
  static int cached = -1;
  static gpuError_t why;
  if (cached < 0 || GPU_DEVICE_COUNT_VARIES) {
    why = gpuGetDeviceCount(&cached);
    if (why != gpuSuccess)
      cached = 0;
  }
  *n = cached;
  if (why != gpuSuccess) {
    char driver[256];
    if (gpu_driver_missing(why, driver, sizeof driver))
      return host->set_error(DEVMM_EDEVICE, "%s", driver);
    return host->set_error(DEVMM_EDEVICE, "%s (%s)", gpuGetErrorString(why), gpuGetErrorName(why));
  }
  if (cached == 0)
    return host->set_error(DEVMM_EDEVICE, "no %s device is present", GPU_PLUGIN);
  return DEVMM_OK;
}

static int device_count(size_t *count) {
  int n;
  int rc = count_devices(&n);
  *count = (size_t)n;
  return rc;
}

static int device_info(size_t index, devmm_device_info *out) {
  gpuDeviceProp p;
  gpuError_t e = gpuGetDeviceProperties(&p, (int)index);
  if (e != gpuSuccess)
    return fail(e, GPU_PLUGIN, (int)index, GPU_PREFIX "GetDeviceProperties", index);
  out->device = (devmm_device){GPU_DEVICE_TYPE, (int32_t)index};
  if (p.major > 0)
    snprintf(out->name, sizeof out->name, "%.80s (compute capability %d.%d)", p.name, p.major,
             p.minor);
  else
    snprintf(out->name, sizeof out->name, "%.120s", p.name);
  out->total_bytes = p.totalGlobalMem;
  out->free_bytes = 0; /* asking would create a context on every device: see mem_info */
  return DEVMM_OK;
}

static int check_device(const char *kind, int32_t id) {
  int n;
  if (count_devices(&n) != DEVMM_OK) {
    char why[256];
    snprintf(why, sizeof why, "%s", host->last_error());
    return host->set_error(DEVMM_EDEVICE, "%s: no %s device %d: 0 devices: %s", kind, GPU_PLUGIN,
                           (int)id, why);
  }
  if (id < 0 || id >= n)
    return host->set_error(DEVMM_EINVAL, "%s: no %s device %d (this machine has %d)", kind,
                           GPU_PLUGIN, (int)id, n);
  return DEVMM_OK;
}

/* Makes `device` current for the calling thread; *prev is the device to restore (-1: none). */
static gpuError_t enter(int device, int *prev) {
  int cur = -1;
  *prev = -1;
  gpuError_t e = gpuGetDevice(&cur);
  if (e != gpuSuccess || cur == device)
    return e;
  if ((e = gpuSetDevice(device)) == gpuSuccess)
    *prev = cur;
  return e;
}

static void leave(int prev) {
  if (prev >= 0)
    gpuSetDevice(prev); /* back to the caller's device; nothing to report if it fails */
}

/* ------------------------------------------------------------------ per-resource state */

enum { KIND_DEVICE, KIND_ASYNC, KIND_MANAGED, KIND_PINNED };
static const char *const kind_names[] = {GPU_PLUGIN ".device", GPU_PLUGIN ".async",
                                         GPU_PLUGIN ".managed", GPU_PLUGIN ".pinned"};

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

/* Declares `e` and makes the resource's device current, or returns the failure. */
#define ENTER(r, prev)                                                                             \
  gpuError_t e = enter((r)->device, &(prev));                                                      \
  if (e != gpuSuccess)                                                                             \
  return fail(e, kind_names[(r)->kind], (r)->device, GPU_PREFIX "SetDevice", (size_t)(r)->device)

/* ------------------------------------------------------------------ ops */

static int g_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream stream,
                      void **out) {
  gpu_res *r = host->resource_context(self);
  const char *kind = kind_names[r->kind];
  *out = NULL;
  if (align > GPU_NATIVE_ALIGNMENT)
    return host->set_error(DEVMM_ENOTSUP,
                           "%s: alignment %zu is above the runtime's %d bytes (stack an aligned "
                           "adaptor)",
                           kind, align, GPU_NATIVE_ALIGNMENT);
  int prev;
  ENTER(r, prev);
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
  default:
    call = GPU_PREFIX "Malloc";
    e = gpuMalloc(out, bytes);
  }
  leave(prev);
  if (e != gpuSuccess) {
    *out = NULL;
    return fail(e, kind, r->device, call, bytes);
  }
  return DEVMM_OK;
}

static int g_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                        devmm_stream stream) {
  (void)align;
  gpu_res *r = host->resource_context(self);
  int prev;
  ENTER(r, prev);
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
  default:
    call = GPU_PREFIX "Free";
    e = gpuFree(ptr);
  }
  leave(prev);
  return e == gpuSuccess ? DEVMM_OK : fail(e, kind_names[r->kind], r->device, call, bytes);
}

/* Page-locked memory is host memory: its free and total bytes are the machine's. */
static int host_mem_info(size_t *free_bytes, size_t *total_bytes) {
  struct sysinfo si;
  if (sysinfo(&si) != 0)
    return host->set_error(DEVMM_EIO, "%s.pinned: sysinfo failed", GPU_PLUGIN);
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
  gpu_res *r = host->resource_context(self);
  if (r->kind == KIND_PINNED)
    return host_mem_info(free_bytes, total_bytes);
  int prev;
  ENTER(r, prev);
  e = gpuMemGetInfo(free_bytes, total_bytes);
  leave(prev);
  return e == gpuSuccess ? DEVMM_OK
                         : fail(e, kind_names[r->kind], r->device, GPU_PREFIX "MemGetInfo", 0);
}

static int g_copy(devmm_resource *self, void *dst, const void *src, size_t n, devmm_stream s) {
  gpu_res *r = host->resource_context(self);
  int prev;
  ENTER(r, prev);
  e = gpuMemcpyAsync(dst, src, n, (gpuStream_t)s);
  leave(prev);
  return e == gpuSuccess ? DEVMM_OK
                         : fail(e, kind_names[r->kind], r->device, GPU_PREFIX "MemcpyAsync", n);
}

static int g_memset(devmm_resource *self, void *dst, int v, size_t n, devmm_stream s) {
  gpu_res *r = host->resource_context(self);
  int prev;
  ENTER(r, prev);
  e = gpuMemsetAsync(dst, v, n, (gpuStream_t)s);
  leave(prev);
  return e == gpuSuccess ? DEVMM_OK
                         : fail(e, kind_names[r->kind], r->device, GPU_PREFIX "MemsetAsync", n);
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
  gpu_res *r = host->resource_context(self);
  if (same_stream(waiter, waitee))
    return DEVMM_OK;
  pthread_mutex_lock(&r->event_lock);
  int prev;
  gpuError_t e = enter(r->device, &prev);
  const char *call = GPU_PREFIX "SetDevice";
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
    if (e == gpuSuccess) { /* the wait captures the record: the event may be recorded again */
      call = GPU_PREFIX "StreamWaitEvent";
      e = gpuStreamWaitEvent((gpuStream_t)waiter, r->event, 0);
    }
    leave(prev);
  }
  pthread_mutex_unlock(&r->event_lock);
  return e == gpuSuccess ? DEVMM_OK : fail(e, kind_names[r->kind], r->device, call, 0);
}

static int g_synchronize(devmm_resource *self, devmm_stream s) {
  gpu_res *r = host->resource_context(self);
  int prev;
  ENTER(r, prev);
  const char *call;
  if (s == DEVMM_STREAM_ALL) {
    call = GPU_PREFIX "DeviceSynchronize";
    e = gpuDeviceSynchronize();
  } else {
    call = GPU_PREFIX "StreamSynchronize";
    e = gpuStreamSynchronize((gpuStream_t)s);
  }
  leave(prev);
  return e == gpuSuccess ? DEVMM_OK : fail(e, kind_names[r->kind], r->device, call, 0);
}

static void g_destroy(devmm_resource *self) {
  gpu_res *r = host->resource_context(self);
  if (r->has_event) {
    int prev;
    if (enter(r->device, &prev) == gpuSuccess) {
      gpuEventDestroy(r->event);
      leave(prev);
    }
  }
  if (r->own_pool)
    gpuMemPoolDestroy(r->pool);
  if (r->pool_fd >= 0)
    close(r->pool_fd);
  pthread_mutex_destroy(&r->event_lock);
  free(r);
}

/* ------------------------------------------------------------------ IPC (ADR 30) */

enum { IPC_RUNTIME = 1, IPC_POOL = 2 };
typedef struct {
  uint32_t tag; /* IPC_RUNTIME: data is a runtime IPC handle; IPC_POOL: a pool's export data */
  int32_t device;
  uint64_t offset; /* IPC_RUNTIME: of the shared range in its allocation (the runtime maps the
                      allocation's base, whatever pointer inside it was exported) */
  ipcfd_ref pool;  /* IPC_POOL: the exporter's pool descriptor */
  unsigned char data[64];
} gpu_ipc_payload;
_Static_assert(sizeof(gpu_ipc_payload) <= DEVMM_IPC_PAYLOAD_SIZE, "the payload fits a handle");

static int ipc_unsupported(const gpu_res *r) {
  const char *kind = kind_names[r->kind];
  if (!GPU_HAS_IPC)
    return host->set_error(DEVMM_ENOTSUP,
                           "%s: sharing memory with other processes is not implemented for this "
                           "runtime (%s: its IPC calls are not loaded)",
                           kind, GPU_PLUGIN);
  return host->set_error(
      DEVMM_ENOTSUP, "%s memory cannot be shared with other processes: %s.device can%s", kind,
      GPU_PLUGIN, GPU_HAS_POOL_IPC ? ", and .async with pool = own and ipc = true" : "");
}

static int g_ipc_get_handle(devmm_resource *self, void *ptr, size_t bytes, unsigned char *payload) {
  gpu_res *r = host->resource_context(self);
  gpu_ipc_payload pl;
  memset(&pl, 0, sizeof pl);
  pl.device = r->device;
#if GPU_HAS_IPC
  const char *kind = kind_names[r->kind];
  if (r->kind == KIND_DEVICE) {
    int prev;
    ENTER(r, prev);
    void *base = NULL;
    size_t size = 0;
    e = gpu_address_range(&base, &size, ptr);
    if (e != gpuSuccess) {
      leave(prev);
      return host->set_error(DEVMM_EINVAL, "%s: %p is not inside a live %s allocation (%s)", kind,
                             ptr, kind, gpuGetErrorString(e));
    }
    size_t off = (size_t)((char *)ptr - (char *)base);
    if (bytes > size - off) {
      leave(prev);
      return host->set_error(DEVMM_EINVAL,
                             "%s: [%p, +%zu) runs past its allocation of %zu bytes at %p", kind,
                             ptr, bytes, size, base);
    }
    gpuIpcMemHandle_t h;
    e = gpuIpcGetMemHandle(&h, base);
    leave(prev);
    if (e != gpuSuccess)
      return fail(e, kind, r->device, GPU_PREFIX "IpcGetMemHandle", bytes);
    pl.tag = IPC_RUNTIME;
    pl.offset = off;
    memcpy(pl.data, &h, sizeof h < sizeof pl.data ? sizeof h : sizeof pl.data);
    memcpy(payload, &pl, sizeof pl);
    return DEVMM_OK;
  }
#if GPU_HAS_POOL_IPC
  if (r->kind == KIND_ASYNC && r->ipc) {
    int prev;
    ENTER(r, prev);
    gpuMemPoolPtrExportData d;
    e = gpuMemPoolExportPointer(&d, ptr);
    leave(prev);
    if (e != gpuSuccess)
      return fail(e, kind, r->device, GPU_PREFIX "MemPoolExportPointer", bytes);
    if (ipcfd_describe(r->pool_fd, 0, &pl.pool) != 0)
      return host->set_error(DEVMM_EIO, "%s: the pool's descriptor %d is gone", kind, r->pool_fd);
    pl.tag = IPC_POOL;
    memcpy(pl.data, &d, sizeof d < sizeof pl.data ? sizeof d : sizeof pl.data);
    memcpy(payload, &pl, sizeof pl);
    return DEVMM_OK;
  }
#endif
#endif
  (void)ptr, (void)bytes, (void)payload;
  return ipc_unsupported(r);
}

static int g_ipc_open(devmm_resource *self, const unsigned char *payload, size_t bytes, int32_t pid,
                      void **out, void **token) {
  gpu_res *r = host->resource_context(self);
  gpu_ipc_payload pl;
  memcpy(&pl, payload, sizeof pl);
  *token = NULL;
#if GPU_HAS_IPC
  const char *kind = kind_names[r->kind];
  if (pl.device != r->device)
    return host->set_error(DEVMM_EINVAL, "%s on %s:%d cannot open a handle of %s:%d memory", kind,
                           GPU_PLUGIN, r->device, GPU_PLUGIN, (int)pl.device);
  if (pl.tag == IPC_RUNTIME && r->kind == KIND_DEVICE) {
    int prev;
    ENTER(r, prev);
    gpuIpcMemHandle_t h;
    memcpy(&h, pl.data, sizeof h < sizeof pl.data ? sizeof h : sizeof pl.data);
    void *base = NULL;
    e = gpuIpcOpenMemHandle(&base, h);
    leave(prev);
    if (e == gpuSuccess) {
      *token = base;                   /* what close unmaps */
      *out = (char *)base + pl.offset; /* the runtime mapped the allocation's base */
    }
    if (e != gpuSuccess) {
      const char *why = gpu_ipc_reason();
      return host->set_error(gpu_ipc_stale(e) ? DEVMM_ENOENT : DEVMM_EDEVICE,
                             "%s on %s:%d: %sIpcOpenMemHandle(%zu bytes from process %d) failed: "
                             "%s (%s)%s%s",
                             kind, GPU_PLUGIN, r->device, GPU_PREFIX, bytes, (int)pid,
                             gpuGetErrorString(e), gpuGetErrorName(e), *why ? ": " : "", why);
    }
    return DEVMM_OK;
  }
#if GPU_HAS_POOL_IPC
  if (pl.tag == IPC_POOL && r->kind == KIND_ASYNC) {
    char why[256];
    int status;
    int fd = ipcfd_open(&pl.pool, pid, 0, &status, why, sizeof why);
    if (fd < 0)
      return host->set_error(status, "%s: cannot open the exporter's pool: %s", kind, why);
    int prev;
    gpuError_t e = enter(r->device, &prev);
    gpuMemPool_t pool = NULL;
    const char *call = GPU_PREFIX "MemPoolImportFromShareableHandle";
    if (e == gpuSuccess)
      e = gpuMemPoolImportFromShareableHandle(&pool, (void *)(uintptr_t)fd,
                                              GPU_POOL_IPC_HANDLE_TYPE, 0);
    close(fd);
    if (e == gpuSuccess) {
      gpuMemPoolPtrExportData d;
      memcpy(&d, pl.data, sizeof d < sizeof pl.data ? sizeof d : sizeof pl.data);
      call = GPU_PREFIX "MemPoolImportPointer";
      e = gpuMemPoolImportPointer(out, pool, &d);
      if (e != gpuSuccess)
        gpuMemPoolDestroy(pool);
    }
    leave(prev);
    if (e != gpuSuccess)
      return fail(e, kind, r->device, call, bytes);
    *token = pool;
    return DEVMM_OK;
  }
#endif
  return host->set_error(DEVMM_EINVAL, "%s cannot open this handle (made by another %s kind)", kind,
                         GPU_PLUGIN);
#else
  (void)bytes, (void)pid, (void)out, (void)pl;
  return ipc_unsupported(r);
#endif
}

static int g_ipc_close(devmm_resource *self, void *ptr, size_t bytes, void *token) {
  gpu_res *r = host->resource_context(self);
#if GPU_HAS_IPC
  int prev;
  ENTER(r, prev);
  const char *call = GPU_PREFIX "IpcCloseMemHandle";
#if GPU_HAS_POOL_IPC
  if (r->kind == KIND_ASYNC) { /* an imported pool's pointer: freed, then the imported pool */
    call = GPU_PREFIX "Free";
    e = gpuFree(ptr);
    gpuMemPoolDestroy((gpuMemPool_t)token);
  } else
#endif
    e = gpuIpcCloseMemHandle(token); /* the base the runtime mapped */
  leave(prev);
  (void)ptr;
  return e == gpuSuccess ? DEVMM_OK : fail(e, kind_names[r->kind], r->device, call, bytes);
#else
  (void)ptr, (void)bytes, (void)token;
  return ipc_unsupported(r);
#endif
}

static const devmm_resource_ipc_ops gpu_ipc_device = {
    .struct_size = sizeof(devmm_resource_ipc_ops),
    .kind = GPU_PLUGIN ".device",
    .get_handle = g_ipc_get_handle,
    .open = g_ipc_open,
    .close = g_ipc_close,
};

static const devmm_resource_ipc_ops gpu_ipc_async = {
    .struct_size = sizeof(devmm_resource_ipc_ops),
    .kind = GPU_PLUGIN ".async",
    .get_handle = g_ipc_get_handle,
    .open = g_ipc_open,
    .close = g_ipc_close,
};

static const devmm_resource_ops gpu_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = g_allocate,
    .deallocate = g_deallocate,
    .mem_info = g_mem_info,
    .copy = g_copy,
    .memset = g_memset,
    .stream_wait = g_stream_wait,
    .synchronize = g_synchronize,
    .destroy = g_destroy,
};

/* The same operations with an IPC group: the device kind, and async pools made with ipc = true
 * (the core finds a group by the kind written in a handle: one table per kind). */
static const devmm_resource_ops gpu_device_ops = {
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

static const devmm_resource_ops gpu_async_ipc_ops = {
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

/* ------------------------------------------------------------------ factories */

static const char *opt(const devmm_option *o, size_t n, const char *key) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(o[i].key, key) == 0)
      return o[i].value;
  return NULL;
}

/* The options of a kind, checked before any runtime call (so that a bad value is reported as
 * such even on a machine without a device). */
typedef struct {
  int own, advise, prefetch, ipc;
  size_t max_size;
  const char *threshold;
} options;

static int parse_options(int kind, const devmm_option *o, size_t n, options *out) {
  const char *name = kind_names[kind], *v;
  *out = (options){0, -1, 0, 0, 0, NULL};
  if (kind == KIND_ASYNC) {
    if ((v = opt(o, n, "pool")) != NULL) {
      if (strcmp(v, "own") == 0)
        out->own = 1;
      else if (strcmp(v, "default") != 0)
        return host->set_error(DEVMM_EINVAL, "%s: pool = %s: expected default or own", name, v);
    }
    if ((v = opt(o, n, "max_pool_size")) != NULL) {
      if (host->parse_size(v, 0, &out->max_size))
        return DEVMM_EINVAL;
      if (out->max_size && !out->own)
        return host->set_error(DEVMM_EINVAL, "%s: max_pool_size needs pool = own", name);
      if (out->max_size && !GPU_POOL_HAS_MAX_SIZE)
        return host->set_error(DEVMM_ENOTSUP,
                               "%s: max_pool_size = %s: this runtime's pools have no maximum "
                               "size (%sMemPoolProps has no maxSize)",
                               name, v, GPU_PREFIX);
    }
    if ((v = opt(o, n, "ipc")) != NULL) {
      if (host->parse_bool(v, &out->ipc))
        return DEVMM_EINVAL;
      if (out->ipc && !out->own)
        return host->set_error(DEVMM_EINVAL,
                               "%s: ipc = %s needs pool = own: the device's default pool cannot "
                               "be shared with other processes",
                               name, v);
      if (out->ipc && !GPU_HAS_POOL_IPC)
        return host->set_error(DEVMM_ENOTSUP,
                               "%s: ipc = %s: this runtime's pools cannot be shared with other "
                               "processes%s (%s.device can share its memory)",
                               name, v, GPU_POOL_IPC_WHY, GPU_PLUGIN);
    }
    if ((out->threshold = opt(o, n, "release_threshold")) != NULL && !out->own)
      return host->set_error(DEVMM_EINVAL,
                             "%s: release_threshold needs pool = own: the device's default pool "
                             "is shared by the whole process, and devmm does not change "
                             "process-wide settings",
                             name);
  } else if (kind == KIND_MANAGED) {
    if ((v = opt(o, n, "advise")) != NULL && strcmp(v, "none") != 0) {
      if (strcmp(v, "read_mostly") == 0)
        out->advise = gpuMemAdviseSetReadMostly;
      else if (strcmp(v, "preferred_location") == 0)
        out->advise = gpuMemAdviseSetPreferredLocation;
      else if (strcmp(v, "accessed_by") == 0)
        out->advise = gpuMemAdviseSetAccessedBy;
      else
        return host->set_error(DEVMM_EINVAL,
                               "%s: advise = %s: expected none, read_mostly, preferred_location "
                               "or accessed_by",
                               name, v);
    }
    if ((v = opt(o, n, "prefetch")) != NULL && host->parse_bool(v, &out->prefetch))
      return DEVMM_EINVAL;
  }
  return DEVMM_OK;
}

static int create(int kind, int32_t id, const devmm_option *o, size_t n, devmm_resource **out) {
  const char *name = kind_names[kind];
  options op;
  int rc = parse_options(kind, o, n, &op);
  if (rc == DEVMM_OK)
    rc = check_device(name, id);
  if (rc)
    return rc;
  size_t threshold = 0;
  if (op.threshold) {
    gpuDeviceProp p;
    size_t total = gpuGetDeviceProperties(&p, id) == gpuSuccess ? p.totalGlobalMem : 0;
    if (host->parse_size(op.threshold, total, &threshold))
      return DEVMM_EINVAL;
  }
  gpu_res *r = calloc(1, sizeof *r);
  if (!r)
    return host->set_error(DEVMM_ENOMEM, "%s: out of host memory", name);
  r->kind = kind;
  r->device = id;
  r->advise = op.advise;
  r->prefetch = op.prefetch;
  r->ipc = op.ipc;
  r->pool_fd = -1;
  pthread_mutex_init(&r->event_lock, NULL);
  gpuError_t e = gpuSuccess;
  const char *call = "";
  if (kind == KIND_ASYNC) {
    if (op.own) {
      gpuMemPoolProps props;
      memset(&props, 0, sizeof props);
      gpu_pool_props(&props, id, op.max_size);
#if GPU_HAS_POOL_IPC
      if (op.ipc)
        props.handleTypes = GPU_POOL_IPC_HANDLE_TYPE;
#endif
      call = GPU_PREFIX "MemPoolCreate";
      e = gpuMemPoolCreate(&r->pool, &props);
      r->own_pool = e == gpuSuccess;
#if GPU_HAS_POOL_IPC
      if (e == gpuSuccess && op.ipc) {
        int fd = -1;
        call = GPU_PREFIX "MemPoolExportToShareableHandle";
        e = gpuMemPoolExportToShareableHandle(&fd, r->pool, GPU_POOL_IPC_HANDLE_TYPE, 0);
        r->pool_fd = e == gpuSuccess ? fd : -1;
      }
#endif
    } else {
      call = GPU_PREFIX "DeviceGetDefaultMemPool";
      e = gpuDeviceGetDefaultMemPool(&r->pool, id);
    }
    if (e == gpuSuccess && threshold) { /* only ever on a pool of our own */
      unsigned long long t = threshold;
      call = GPU_PREFIX "MemPoolSetAttribute";
      e = gpuMemPoolSetAttribute(r->pool, gpuMemPoolAttrReleaseThreshold, &t);
    }
  }
  if (e != gpuSuccess) {
    if (r->own_pool)
      gpuMemPoolDestroy(r->pool);
    if (r->pool_fd >= 0)
      close(r->pool_fd);
    pthread_mutex_destroy(&r->event_lock);
    free(r);
    return fail(e, name, id, call, 0);
  }
  int type = kind == KIND_PINNED    ? GPU_HOST_TYPE
             : kind == KIND_MANAGED ? GPU_MANAGED_TYPE
                                    : GPU_DEVICE_TYPE;
  devmm_device d = {type, kind == KIND_PINNED ? 0 : id};
  unsigned flags =
      DEVMM_RESOURCE_THREAD_SAFE |
      (kind == KIND_PINNED || kind == KIND_MANAGED ? DEVMM_RESOURCE_HOST_ACCESSIBLE : 0);
  char full[64];
  snprintf(full, sizeof full, "%s%s", name, kind == KIND_ASYNC && r->own_pool ? "(own pool)" : "");
  snprintf(full, sizeof full, "%s%s", name,
           kind == KIND_ASYNC && r->own_pool ? (r->ipc ? "(own pool, ipc)" : "(own pool)") : "");
  const devmm_resource_ops *ops = kind == KIND_DEVICE            ? &gpu_device_ops
                                  : kind == KIND_ASYNC && r->ipc ? &gpu_async_ipc_ops
                                                                 : &gpu_ops;
  rc = host->resource_create(ops, r, d, full, flags, out);
  if (rc) {
    if (r->pool_fd >= 0)
      close(r->pool_fd);
    if (r->own_pool)
      gpuMemPoolDestroy(r->pool);
    pthread_mutex_destroy(&r->event_lock);
    free(r);
  }
  return rc;
}

#define FACTORY(fn, kind)                                                                          \
  static int fn(const devmm_host_services *h, int32_t id, const devmm_option *o, size_t n,         \
                devmm_resource **out) {                                                            \
    (void)h;                                                                                       \
    return create(kind, id, o, n, out);                                                            \
  }
FACTORY(device_create, KIND_DEVICE)
FACTORY(async_create, KIND_ASYNC)
FACTORY(managed_create, KIND_MANAGED)
FACTORY(pinned_create, KIND_PINNED)

static const char *const async_options[] = {"pool", "release_threshold", "max_pool_size", "ipc",
                                            NULL};
static const char *const managed_options[] = {"advise", "prefetch", NULL};

static const char *const async_help[] = {
    "default (the device's pool) or own (a pool of this resource's)",
    "what an own pool keeps cached at a synchronisation (a size)",
    "the most an own pool may hold (a size; 0: no limit)", NULL};
static const char *const managed_help[] = {"none, read_mostly, preferred_location or accessed_by",
                                           "prefetch each allocation to the device (boolean)",
                                           NULL};

#define GPU_KIND(var, suffix, desc, type, opts, help, factory)                                     \
  static const devmm_resource_kind var = {.struct_size = sizeof(devmm_resource_kind),              \
                                          .name = GPU_PLUGIN suffix,                               \
                                          .description = desc,                                     \
                                          .device_type = type,                                     \
                                          .options = opts,                                         \
                                          .create = factory,                                       \
                                          .option_help = help}
GPU_KIND(device_kind, ".device", "device memory, synchronous", GPU_DEVICE_TYPE, NULL, NULL,
         device_create);
GPU_KIND(async_kind, ".async", "stream-ordered pool allocation", GPU_DEVICE_TYPE, async_options,
         async_help, async_create);
GPU_KIND(managed_kind, ".managed", "managed (unified) memory", GPU_DEVICE_TYPE, managed_options,
         managed_help, managed_create);
GPU_KIND(pinned_kind, ".pinned", "page-locked host memory", GPU_HOST_TYPE, NULL, NULL,
         pinned_create);
static const devmm_resource_kind *const kinds[] = {&device_kind, &async_kind, &managed_kind,
                                                   &pinned_kind};

static char version[64];

static const devmm_plugin descriptor = {
    .abi_major = DEVMM_PLUGIN_ABI_MAJOR,
    .abi_minor = DEVMM_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(devmm_plugin),
    .name = GPU_PLUGIN,
    .version = version,
    .description = GPU_DESCRIPTION,
    .device_count = device_count,
    .device_info = device_info,
    .nkinds = sizeof kinds / sizeof kinds[0],
    .kinds = kinds,
    .options = GPU_PLUGIN_OPTIONS,
    .configure = GPU_CONFIGURE,
};

DEVMM_PLUGIN_EXPORT const devmm_plugin *devmm_plugin_entry(uint32_t major, uint32_t minor,
                                                           const devmm_host_services *h) {
  (void)minor;
  if (major != DEVMM_PLUGIN_ABI_MAJOR || !h || h->struct_size < sizeof(devmm_host_services))
    return NULL;
  host = h;
  GPU_ON_ENTRY(h);
  char rt[48];
  snprintf(version, sizeof version, "1.0.0 (%s)", gpu_runtime_version(rt, sizeof rt));
  return &descriptor;
}
