/* The GPU plugin's kinds (<gpu>.device, .async, .managed, .pinned, .system): their options and
 * help, and the factory that makes a resource of each (with its pool, for <gpu>.async). */
#include "gpu_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *opt(const devmm_option *o, size_t n, const char *key) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(o[i].key, key) == 0)
      return o[i].value;
  return NULL;
}

/* The options of a kind, checked before any runtime call (so that a bad value is reported as
 * such even on a machine without a device). */
typedef struct {
  int own, advise, prefetch, ipc, isolate, managed;
  size_t max_size, headroom;
  const char *threshold;
  uintptr_t view; /* pool = <address>: a pool another library owns */
} options;

static int parse_options(int kind, const devmm_option *o, size_t n, options *out) {
  const char *name = gpu_kind_names[kind], *v;
  *out = (options){0, -1, 0, 0, 1, 0, 0, 0, NULL, 0};
  if (kind == KIND_DEVICE && (v = opt(o, n, "ipc_isolate")) != NULL &&
      gpu_host->parse_bool(v, &out->isolate))
    return DEVMM_EINVAL;
  if (kind == KIND_ASYNC) {
    if ((v = opt(o, n, "pool")) != NULL) {
      char *end = NULL;
      if (strcmp(v, "own") == 0)
        out->own = 1;
      else if (strcmp(v, "managed") == 0 && !GPU_HAS_MANAGED_POOL)
        return gpu_host->set_error(DEVMM_ENOTSUP, "%s: pool = managed: %s", name,
                                   GPU_MANAGED_POOL_WHY);
      else if (strcmp(v, "managed") == 0)
        out->managed = 1;
      else if (strncmp(v, "0x", 2) == 0 && (out->view = strtoull(v + 2, &end, 16), *end == 0) &&
               end != v + 2 && out->view)
        ; /* a view (RMM's CudaAsyncViewMemoryResource) */
      else if (strcmp(v, "default") != 0)
        return gpu_host->set_error(DEVMM_EINVAL,
                                   "%s: pool = %s: expected default, own, managed or the address "
                                   "of a pool another library owns (0x...: a view, never "
                                   "destroyed)",
                                   name, v);
    }
    if ((v = opt(o, n, "max_pool_size")) != NULL) {
      if (gpu_host->parse_size(v, 0, &out->max_size))
        return DEVMM_EINVAL;
      if (out->max_size && !out->own)
        return gpu_host->set_error(DEVMM_EINVAL, "%s: max_pool_size needs pool = own", name);
      if (out->max_size && !GPU_POOL_HAS_MAX_SIZE)
        return gpu_host->set_error(DEVMM_ENOTSUP,
                                   "%s: max_pool_size = %s: this runtime's pools have no maximum "
                                   "size (%sMemPoolProps has no maxSize)",
                                   name, v, GPU_PREFIX);
    }
    if ((v = opt(o, n, "ipc")) != NULL) {
      if (gpu_host->parse_bool(v, &out->ipc))
        return DEVMM_EINVAL;
      if (out->ipc && !out->own)
        return gpu_host->set_error(
            DEVMM_EINVAL,
            "%s: ipc = %s needs pool = own: the device's default pool cannot "
            "be shared with other processes",
            name, v);
      if (out->ipc && !GPU_HAS_POOL_IPC)
        return gpu_host->set_error(DEVMM_ENOTSUP,
                                   "%s: ipc = %s: this runtime's pools cannot be shared with other "
                                   "processes%s (%s.device can share its memory)",
                                   name, v, GPU_POOL_IPC_WHY, GPU_PLUGIN);
    }
    if ((out->threshold = opt(o, n, "release_threshold")) != NULL && !out->own)
      return gpu_host->set_error(
          DEVMM_EINVAL,
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
        return gpu_host->set_error(
            DEVMM_EINVAL,
            "%s: advise = %s: expected none, read_mostly, preferred_location "
            "or accessed_by",
            name, v);
    }
    if ((v = opt(o, n, "prefetch")) != NULL && gpu_host->parse_bool(v, &out->prefetch))
      return DEVMM_EINVAL;
  } else if (kind == KIND_SYSTEM) {
    if ((v = opt(o, n, "prefetch")) != NULL && gpu_host->parse_bool(v, &out->prefetch))
      return DEVMM_EINVAL;
    if ((v = opt(o, n, "headroom")) != NULL && gpu_host->parse_size(v, 0, &out->headroom))
      return gpu_host->set_error(DEVMM_EINVAL,
                                 "%s: headroom = %s: expected a size (bytes, or with a unit: "
                                 "1GiB, 512MiB)",
                                 name, v);
  }
  return DEVMM_OK;
}

#if GPU_HAS_POOL_ACCESS
/* An own pool grants read-write access to every device that can reach the pool's device as a
 * peer (cudaMemPoolSetAccess): a pool's memory does not follow peer access, and a program that
 * enables peer access expects devmm's memory to be reachable as cudaMalloc's is (ADR 38). The
 * device's default pool is the process's: devmm leaves its access alone. */
static gpuError_t grant_peers(const gpu_res *r, const char **call) {
  int n = 0;
  *call = GPU_PREFIX "GetDeviceCount";
  gpuError_t e = gpuGetDeviceCount(&n);
  for (int d = 0; e == gpuSuccess && d < n; d++) {
    int can = 0;
    if (d == r->device)
      continue;
    *call = GPU_PREFIX "DeviceCanAccessPeer";
    e = gpuDeviceCanAccessPeer(&can, d, r->device);
    if (e == gpuSuccess && can) {
      *call = GPU_PREFIX "MemPoolSetAccess";
      e = gpu_pool_grant(r->pool, d);
    }
  }
  return e;
}
#endif

/* The pool of a <gpu>.async resource: its own (made shareable with ipc = true) or the device's
 * default one, then the release threshold (only ever on a pool of its own). *call: the runtime
 * call made last, for the message if it failed. */
static gpuError_t setup_pool(gpu_res *r, const options *op, size_t threshold, const char **call) {
  gpuError_t e;
  if (op->own) {
    gpuMemPoolProps props;
    memset(&props, 0, sizeof props);
    gpu_pool_props(&props, r->device, op->max_size);
#if GPU_HAS_POOL_IPC
    if (op->ipc)
      props.handleTypes = GPU_POOL_IPC_HANDLE_TYPE;
#endif
    *call = GPU_PREFIX "MemPoolCreate";
    e = gpuMemPoolCreate(&r->pool, &props);
    r->own_pool = e == gpuSuccess;
#if GPU_HAS_POOL_ACCESS
    if (e == gpuSuccess)
      e = grant_peers(r, call);
#endif
#if GPU_HAS_POOL_IPC
    if (e == gpuSuccess && op->ipc) {
      int fd = -1;
      *call = GPU_PREFIX "MemPoolExportToShareableHandle";
      e = gpuMemPoolExportToShareableHandle(&fd, r->pool, GPU_POOL_IPC_HANDLE_TYPE, 0);
      r->pool_fd = e == gpuSuccess ? fd : -1;
    }
#endif
  } else if (op->managed) { /* the device's managed pool: the process's, as the default one */
    r->managed_pool = 1;
    *call = GPU_PREFIX "MemGetDefaultMemPool";
    e = gpu_default_managed_pool(&r->pool, r->device);
  } else if (op->view) { /* a pool another library owns: checked, never destroyed */
    r->pool = (gpuMemPool_t)op->view;
    r->view = 1;
    *call = GPU_PREFIX "MemPoolGetAttribute";
    e = gpu_pool_check(r->pool);
  } else {
    *call = GPU_PREFIX "DeviceGetDefaultMemPool";
    e = gpuDeviceGetDefaultMemPool(&r->pool, r->device);
  }
  if (e == gpuSuccess && threshold) {
    unsigned long long t = threshold;
    *call = GPU_PREFIX "MemPoolSetAttribute";
    e = gpuMemPoolSetAttribute(r->pool, gpuMemPoolAttrReleaseThreshold, &t);
  }
  return e;
}

void gpu_res_release(gpu_res *r) {
  if (r->own_pool)
    gpuMemPoolDestroy(r->pool);
  if (r->pool_fd >= 0)
    close(r->pool_fd);
  pthread_mutex_destroy(&r->event_lock);
  free(r);
}

static int create(int kind, int32_t id, const devmm_option *o, size_t n, devmm_resource **out) {
  const char *name = gpu_kind_names[kind];
  options op;
  int rc = parse_options(kind, o, n, &op);
  if (rc == DEVMM_OK)
    rc = gpu_check_device(name, id);
  if (rc)
    return rc;
  if (kind == KIND_SYSTEM) { /* HMM or ATS, else the device cannot address malloc's memory */
    int can = 0;
    gpuError_t e = gpu_pageable_access(&can, id);
    if (e != gpuSuccess)
      return gpu_fail(e, name, id, GPU_PREFIX "DeviceGetAttribute", 0);
    if (!can)
      return gpu_host->set_error(DEVMM_ENOTSUP,
                                 "%s on %s:%d: this platform does not let the GPU address "
                                 "pageable memory (%s = 0): %s",
                                 name, GPU_PLUGIN, id, GPU_PAGEABLE_ATTR, GPU_PAGEABLE_NEEDS);
  }
  char why[128];
  if (op.managed && gpu_managed_pool_unsupported(why, sizeof why))
    return gpu_host->set_error(DEVMM_ENOTSUP, "%s on %s:%d: pool = managed: %s", name, GPU_PLUGIN,
                               id, why);
  size_t threshold = 0;
  if (op.threshold) {
    gpuDeviceProp p;
    size_t total = gpuGetDeviceProperties(&p, id) == gpuSuccess ? p.totalGlobalMem : 0;
    if (gpu_host->parse_size(op.threshold, total, &threshold))
      return DEVMM_EINVAL;
  }
  gpu_res *r = calloc(1, sizeof *r);
  if (!r)
    return gpu_host->set_error(DEVMM_ENOMEM, "%s: out of host memory", name);
  r->kind = kind;
  r->device = id;
  r->advise = op.advise;
  r->prefetch = op.prefetch;
  r->ipc = op.ipc;
  r->isolate = kind == KIND_DEVICE && op.isolate;
  r->headroom = op.headroom;
  r->pool_fd = -1;
  pthread_mutex_init(&r->event_lock, NULL);
  gpuError_t e = gpuSuccess;
  const char *call = "";
  if (kind == KIND_ASYNC)
    e = setup_pool(r, &op, threshold, &call);
  if (e != gpuSuccess) {
    gpu_res_release(r);
    return gpu_fail(e, name, id, call, 0);
  }
  /* system memory is reached as managed memory is: by the host and the device */
  int type = kind == KIND_PINNED                                              ? GPU_HOST_TYPE
             : kind == KIND_MANAGED || kind == KIND_SYSTEM || r->managed_pool ? GPU_MANAGED_TYPE
                                                                              : GPU_DEVICE_TYPE;
  devmm_device d = {type, kind == KIND_PINNED ? 0 : id};
  unsigned flags = DEVMM_RESOURCE_THREAD_SAFE | (kind == KIND_PINNED || kind == KIND_MANAGED ||
                                                         kind == KIND_SYSTEM || r->managed_pool
                                                     ? DEVMM_RESOURCE_HOST_ACCESSIBLE
                                                     : 0);
  char sfx[40] = "", full[64];
  if (r->view)
    snprintf(sfx, sizeof sfx, "(view %#llx)", (unsigned long long)op.view);
  else if (kind == KIND_SYSTEM && (r->headroom || r->prefetch))
    snprintf(sfx, sizeof sfx, "(%s%s%s)", r->headroom ? "headroom" : "",
             r->headroom && r->prefetch ? ", " : "", r->prefetch ? "prefetch" : "");
  else if (r->managed_pool)
    snprintf(sfx, sizeof sfx, "(managed pool)");
  else if (kind == KIND_ASYNC && r->own_pool)
    snprintf(sfx, sizeof sfx, "%s", r->ipc ? "(own pool, ipc)" : "(own pool)");
  snprintf(full, sizeof full, "%s%s", name, sfx);
  int moves = kind == KIND_MANAGED || kind == KIND_SYSTEM || r->managed_pool;
  const devmm_resource_ops *ops = kind == KIND_DEVICE            ? &gpu_device_ops
                                  : kind == KIND_ASYNC && r->ipc ? &gpu_async_ipc_ops
                                  : moves                        ? &gpu_prefetch_ops
                                                                 : &gpu_ops;
  rc = gpu_host->resource_create(ops, r, d, full, flags, out);
  if (rc)
    gpu_res_release(r);
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
FACTORY(system_create, KIND_SYSTEM)

static const char *const async_options[] = {"pool", "release_threshold", "max_pool_size", "ipc",
                                            NULL};
static const char *const managed_options[] = {"advise", "prefetch", NULL};
static const char *const device_options[] = {"ipc_isolate", NULL};
static const char *const device_help[] = {
    "each allocation a 2 MiB block of its own, so that an IPC export shows the receiver nothing "
    "else (boolean, default true; false packs small allocations, as the runtime does)",
    NULL};

static const char *const async_help[] = {
    "default (the device's pool), own (a pool of this resource's), managed (the device's pool "
    "of managed memory: CUDA 13) or 0x<address>: a view of a pool another library owns (CuPy's, "
    "torch's), which devmm never destroys",
    "what an own pool keeps cached at a synchronisation (a size)",
    "the most an own pool may hold (a size; 0: no limit)",
    "share an own pool with other processes (boolean; refused where the runtime cannot)", NULL};
static const char *const managed_help[] = {"none, read_mostly, preferred_location or accessed_by",
                                           "prefetch each allocation to the device (boolean)",
                                           NULL};

#define GPU_KIND(var, suffix, desc, type, opts, help, factory)                                     \
  const devmm_resource_kind var = {.struct_size = sizeof(devmm_resource_kind),                     \
                                   .name = GPU_PLUGIN suffix,                                      \
                                   .description = desc,                                            \
                                   .device_type = type,                                            \
                                   .options = opts,                                                \
                                   .create = factory,                                              \
                                   .option_help = help}
GPU_KIND(gpu_device_kind, ".device", "device memory, synchronous", GPU_DEVICE_TYPE, device_options,
         device_help, device_create);
GPU_KIND(gpu_async_kind, ".async", "stream-ordered pool allocation", GPU_DEVICE_TYPE, async_options,
         async_help, async_create);
GPU_KIND(gpu_managed_kind, ".managed", "managed (unified) memory", GPU_DEVICE_TYPE, managed_options,
         managed_help, managed_create);
GPU_KIND(gpu_pinned_kind, ".pinned", "page-locked host memory", GPU_HOST_TYPE, NULL, NULL,
         pinned_create);
static const char *const system_options[] = {"headroom", "prefetch", NULL};
static const char *const system_help[] = {
    "device memory to leave free for the driver and other processes: the part of an allocation "
    "past the device's free memory less this prefers the host (a size; 0: none, as RMM's "
    "SamHeadroomMemoryResource)",
    "prefetch each allocation to the device on its stream (boolean)", NULL};
GPU_KIND(gpu_system_kind, ".system",
         "system-allocated (malloc) memory the device addresses: HMM or ATS, refused elsewhere",
         GPU_DEVICE_TYPE, system_options, system_help, system_create);
