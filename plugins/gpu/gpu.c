/* The GPU plugins: one implementation, built twice — devmm-cuda against the CUDA runtime
 * (plugins/cuda/backend.h) and devmm-rocm against HIP (plugins/rocm/backend.h). Every call is
 * a real runtime call; without a driver or device the plugin still loads and reports
 * "0 devices: <runtime's reason>", and creating a resource fails with that reason.
 *
 *   <gpu>.device   cudaMalloc / hipMalloc (synchronous)
 *   <gpu>.async    cudaMallocFromPoolAsync on the device's default pool or a pool of its own
 *                  (options pool = default|own, release_threshold, max_pool_size)
 *   <gpu>.managed  cudaMallocManaged (options advise = none|read_mostly|preferred_location|
 *                  accessed_by, prefetch = true|false)
 *   <gpu>.pinned   cudaHostAlloc / hipHostMalloc: page-locked host memory (DLPack CUDAHost)
 * Copy, memset (async on the given stream), stream_wait (event record + wait) and synchronize
 * are offered by every kind. */
#include <devmm/plugin.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backend.h"

static const devmm_host_services *host;

/* ------------------------------------------------------------------ errors and devices */

static int fail(gpuError_t e, const char *kind, int device, const char *call, size_t bytes) {
  int status = e == gpuErrorMemoryAllocation ? DEVMM_ENOMEM : DEVMM_EDEVICE;
  return host->set_error(status, "%s%s on %s:%d: %s(%zu) failed: %s (%s)",
                         status == DEVMM_ENOMEM ? "out of memory: " : "", kind, GPU_PLUGIN, device,
                         call, bytes, gpuGetErrorString(e), gpuGetErrorName(e));
}

/* The device count, or an error saying why there is none (cached: it does not change). */
static int count_devices(int *n) {
  static int cached = -1;
  static gpuError_t why;
  if (cached < 0) {
    why = gpuGetDeviceCount(&cached);
    if (why != gpuSuccess)
      cached = 0;
  }
  *n = cached;
  if (why != gpuSuccess)
    return host->set_error(DEVMM_EDEVICE, "%s (%s)", gpuGetErrorString(why), gpuGetErrorName(why));
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
    return fail(e, GPU_PLUGIN, (int)index, "GetDeviceProperties", 0);
  out->device = (devmm_device){GPU_DEVICE_TYPE, (int32_t)index};
  snprintf(out->name, sizeof out->name, "%.96s (compute capability %d.%d)", p.name, p.major,
           p.minor);
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
} gpu_res;

/* Runs a synchronous call with `device` current, then restores the caller's device. */
#define ON_DEVICE(dev, call)                                                                       \
  ({                                                                                               \
    int prev_ = 0;                                                                                 \
    gpuGetDevice(&prev_);                                                                          \
    if (prev_ != (dev))                                                                            \
      gpuSetDevice(dev);                                                                           \
    gpuError_t e_ = (call);                                                                        \
    if (prev_ != (dev))                                                                            \
      gpuSetDevice(prev_);                                                                         \
    e_;                                                                                            \
  })

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
  gpuError_t e;
  switch (r->kind) {
  case KIND_ASYNC:
    e = gpuMallocFromPoolAsync(out, bytes, r->pool, (gpuStream_t)stream);
    if (e != gpuSuccess)
      return fail(e, kind, r->device, "MallocFromPoolAsync", bytes);
    return DEVMM_OK;
  case KIND_MANAGED:
    e = ON_DEVICE(r->device, gpuMallocManaged(out, bytes, gpuMemAttachGlobal));
    if (e != gpuSuccess)
      return fail(e, kind, r->device, "MallocManaged", bytes);
    if (r->advise >= 0 &&
        (e = gpu_advise(*out, bytes, (gpuMemoryAdvise)r->advise, r->device)) != gpuSuccess)
      goto undo;
    if (r->prefetch &&
        (e = gpu_prefetch(*out, bytes, r->device, (gpuStream_t)stream)) != gpuSuccess)
      goto undo;
    return DEVMM_OK;
  undo:
    gpuFree(*out);
    *out = NULL;
    return fail(e, kind, r->device, r->prefetch ? "MemPrefetchAsync" : "MemAdvise", bytes);
  case KIND_PINNED:
    e = gpuHostAlloc(out, bytes);
    if (e != gpuSuccess)
      return fail(e, kind, r->device, "HostAlloc", bytes);
    return DEVMM_OK;
  default:
    e = ON_DEVICE(r->device, gpuMalloc(out, bytes));
    if (e != gpuSuccess)
      return fail(e, kind, r->device, "Malloc", bytes);
    return DEVMM_OK;
  }
}

static int g_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                        devmm_stream stream) {
  (void)align;
  gpu_res *r = host->resource_context(self);
  gpuError_t e;
  switch (r->kind) {
  case KIND_ASYNC:
    e = gpuFreeAsync(ptr, (gpuStream_t)stream);
    break;
  case KIND_PINNED:
    e = gpuFreeHost(ptr);
    break;
  default:
    e = gpuFree(ptr);
  }
  return e == gpuSuccess ? DEVMM_OK : fail(e, kind_names[r->kind], r->device, "Free", bytes);
}

static int g_mem_info(devmm_resource *self, size_t *free_bytes, size_t *total_bytes) {
  gpu_res *r = host->resource_context(self);
  gpuError_t e = ON_DEVICE(r->device, gpuMemGetInfo(free_bytes, total_bytes));
  return e == gpuSuccess ? DEVMM_OK : fail(e, kind_names[r->kind], r->device, "MemGetInfo", 0);
}

static int g_copy(devmm_resource *self, void *dst, const void *src, size_t n, devmm_stream s) {
  gpu_res *r = host->resource_context(self);
  gpuError_t e = gpuMemcpyAsync(dst, src, n, (gpuStream_t)s);
  return e == gpuSuccess ? DEVMM_OK : fail(e, kind_names[r->kind], r->device, "MemcpyAsync", n);
}

static int g_memset(devmm_resource *self, void *dst, int v, size_t n, devmm_stream s) {
  gpu_res *r = host->resource_context(self);
  gpuError_t e = gpuMemsetAsync(dst, v, n, (gpuStream_t)s);
  return e == gpuSuccess ? DEVMM_OK : fail(e, kind_names[r->kind], r->device, "MemsetAsync", n);
}

static int g_stream_wait(devmm_resource *self, devmm_stream waiter, devmm_stream waitee) {
  gpu_res *r = host->resource_context(self);
  if (waiter == waitee)
    return DEVMM_OK;
  gpuEvent_t ev;
  gpuError_t e = gpuEventCreateWithFlags(&ev, gpuEventDisableTiming);
  if (e != gpuSuccess)
    return fail(e, kind_names[r->kind], r->device, "EventCreateWithFlags", 0);
  if ((e = gpuEventRecord(ev, (gpuStream_t)waitee)) == gpuSuccess)
    e = gpuStreamWaitEvent((gpuStream_t)waiter, ev, 0);
  gpuEventDestroy(ev); /* safe: the wait already captured the event */
  return e == gpuSuccess ? DEVMM_OK : fail(e, kind_names[r->kind], r->device, "StreamWaitEvent", 0);
}

static int g_synchronize(devmm_resource *self, devmm_stream s) {
  gpu_res *r = host->resource_context(self);
  gpuError_t e = gpuStreamSynchronize((gpuStream_t)s);
  return e == gpuSuccess ? DEVMM_OK
                         : fail(e, kind_names[r->kind], r->device, "StreamSynchronize", 0);
}

static void g_destroy(devmm_resource *self) {
  gpu_res *r = host->resource_context(self);
  if (r->own_pool)
    gpuMemPoolDestroy(r->pool);
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

static int create(int kind, int32_t id, const devmm_option *o, size_t n, devmm_resource **out) {
  const char *name = kind_names[kind];
  int rc = check_device(name, id);
  if (rc)
    return rc;
  gpu_res *r = calloc(1, sizeof *r);
  if (!r)
    return host->set_error(DEVMM_ENOMEM, "%s: out of host memory", name);
  r->kind = kind;
  r->device = id;
  r->advise = -1;
  gpuError_t e = gpuSuccess;
  const char *v;
  if (kind == KIND_ASYNC) {
    size_t threshold = 0, max_size = 0;
    int own = 0;
    if ((v = opt(o, n, "pool")) != NULL) {
      if (strcmp(v, "own") == 0)
        own = 1;
      else if (strcmp(v, "default") != 0) {
        free(r);
        return host->set_error(DEVMM_EINVAL, "%s: pool = %s: expected default or own", name, v);
      }
    }
    if ((v = opt(o, n, "max_pool_size")) != NULL &&
        (host->parse_size(v, 0, &max_size) || (!own && max_size))) {
      free(r);
      return max_size ? host->set_error(DEVMM_EINVAL, "%s: max_pool_size needs pool = own", name)
                      : DEVMM_EINVAL;
    }
    if ((v = opt(o, n, "release_threshold")) != NULL) {
      gpuDeviceProp p;
      size_t total = gpuGetDeviceProperties(&p, id) == gpuSuccess ? p.totalGlobalMem : 0;
      if (host->parse_size(v, total, &threshold)) {
        free(r);
        return DEVMM_EINVAL;
      }
    }
    if (own) {
      gpuMemPoolProps props;
      memset(&props, 0, sizeof props);
      gpu_pool_props(&props, id, max_size);
      e = gpuMemPoolCreate(&r->pool, &props);
      r->own_pool = e == gpuSuccess;
    } else {
      e = gpuDeviceGetDefaultMemPool(&r->pool, id);
    }
    if (e == gpuSuccess && threshold) {
      unsigned long long t = threshold;
      e = gpuMemPoolSetAttribute(r->pool, gpuMemPoolAttrReleaseThreshold, &t);
    }
  } else if (kind == KIND_MANAGED) {
    if ((v = opt(o, n, "advise")) != NULL && strcmp(v, "none") != 0) {
      if (strcmp(v, "read_mostly") == 0)
        r->advise = gpuMemAdviseSetReadMostly;
      else if (strcmp(v, "preferred_location") == 0)
        r->advise = gpuMemAdviseSetPreferredLocation;
      else if (strcmp(v, "accessed_by") == 0)
        r->advise = gpuMemAdviseSetAccessedBy;
      else {
        free(r);
        return host->set_error(DEVMM_EINVAL,
                               "%s: advise = %s: expected none, read_mostly, preferred_location "
                               "or accessed_by",
                               name, v);
      }
    }
    if ((v = opt(o, n, "prefetch")) != NULL && host->parse_bool(v, &r->prefetch)) {
      free(r);
      return DEVMM_EINVAL;
    }
  }
  if (e != gpuSuccess) {
    if (r->own_pool)
      gpuMemPoolDestroy(r->pool);
    free(r);
    return fail(e, name, id, "MemPool setup", 0);
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

static const devmm_resource_kind kinds[] = {
    {sizeof(devmm_resource_kind), GPU_PLUGIN ".device", "device memory, synchronous",
     GPU_DEVICE_TYPE, NULL, device_create},
    {sizeof(devmm_resource_kind), GPU_PLUGIN ".async", "stream-ordered pool allocation",
     GPU_DEVICE_TYPE, async_options, async_create},
    {sizeof(devmm_resource_kind), GPU_PLUGIN ".managed", "managed (unified) memory",
     GPU_DEVICE_TYPE, managed_options, managed_create},
    {sizeof(devmm_resource_kind), GPU_PLUGIN ".pinned", "page-locked host memory", GPU_HOST_TYPE,
     NULL, pinned_create},
};

static char version[64];

static const devmm_plugin descriptor = {
    DEVMM_PLUGIN_ABI_MAJOR,
    DEVMM_PLUGIN_ABI_MINOR,
    sizeof(devmm_plugin),
    GPU_PLUGIN,
    version,
    GPU_DESCRIPTION,
    device_count,
    device_info,
    sizeof kinds / sizeof kinds[0],
    kinds,
    NULL,
};

DEVMM_PLUGIN_EXPORT const devmm_plugin *devmm_plugin_entry(uint32_t major, uint32_t minor,
                                                           const devmm_host_services *h) {
  (void)minor;
  if (major != DEVMM_PLUGIN_ABI_MAJOR || !h || h->struct_size < sizeof(devmm_host_services))
    return NULL;
  host = h;
  char rt[48];
  snprintf(version, sizeof version, "1.0.0 (%s)", gpu_runtime_version(rt, sizeof rt));
  return &descriptor;
}
