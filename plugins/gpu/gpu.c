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
 * are offered by every kind. Every call runs with the resource's device current, so a NULL
 * stream is always that device's default stream, and a failed device switch is an error. */
#include <devmm/plugin.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/sysinfo.h>

#include "backend.h"

#ifndef GPU_CONFIGURE /* plugin-wide options: only the simulator has some */
#define GPU_PLUGIN_OPTIONS NULL
#define GPU_CONFIGURE NULL
#define GPU_ON_ENTRY(h) ((void)(h))
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
  pthread_mutex_destroy(&r->event_lock);
  free(r);
}

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
  int own, advise, prefetch;
  size_t max_size;
  const char *threshold;
} options;

static int parse_options(int kind, const devmm_option *o, size_t n, options *out) {
  const char *name = kind_names[kind], *v;
  *out = (options){0, -1, 0, 0, NULL};
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
  pthread_mutex_init(&r->event_lock, NULL);
  gpuError_t e = gpuSuccess;
  const char *call = "";
  if (kind == KIND_ASYNC) {
    if (op.own) {
      gpuMemPoolProps props;
      memset(&props, 0, sizeof props);
      gpu_pool_props(&props, id, op.max_size);
      call = GPU_PREFIX "MemPoolCreate";
      e = gpuMemPoolCreate(&r->pool, &props);
      r->own_pool = e == gpuSuccess;
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
  rc = host->resource_create(&gpu_ops, r, d, full, flags, out);
  if (rc) {
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

static const char *const async_options[] = {"pool", "release_threshold", "max_pool_size", NULL};
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
