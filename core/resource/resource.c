/* Memory resources: creation, reference counting and the checked entry points. */
#include "resource_internal.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ===================================================================== lifetime */

/* The copy and memset a host-accessible resource without its own gets: the CPU does the work,
 * synchronously, so the stream is already ordered. */
static int host_copy(devmm_resource *self, void *dst, const void *src, size_t bytes,
                     devmm_stream stream) {
  (void)self, (void)stream;
  memmove(dst, src, bytes);
  return DEVMM_OK;
}
static int host_memset(devmm_resource *self, void *dst, int value, size_t bytes,
                       devmm_stream stream) {
  (void)self, (void)stream;
  memset(dst, value, bytes);
  return DEVMM_OK;
}

static int create(const devmm_resource_ops *ops, void *ctx, devmm_device device, const char *name,
                  unsigned flags, devmm_resource *upstream, devmm_resource **out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_resource_create: out is NULL");
  *out = NULL;
  if (!ops || !name)
    return devmm_set_error(DEVMM_EINVAL, "devmm_resource_create: %s is NULL",
                           !ops ? "ops" : "name");
  if (ops->struct_size < offsetof(devmm_resource_ops, mem_info) ||
      ops->struct_size > sizeof(devmm_resource_ops) * 4)
    return devmm_set_error(DEVMM_EINVAL,
                           "resource '%.64s': ops.struct_size %zu is not a "
                           "devmm_resource_ops size (expected %zu or an older "
                           "version's)",
                           name, ops->struct_size, sizeof(devmm_resource_ops));
  if (ops->struct_size % sizeof(void *) != 0) /* every field is a size_t or a pointer */
    return devmm_set_error(DEVMM_EINVAL,
                           "resource '%.64s': ops.struct_size %zu ends inside a field (a "
                           "devmm_resource_ops size is a multiple of %zu: sizeof, or offsetof a "
                           "field)",
                           name, ops->struct_size, sizeof(void *));
  if (!ops->allocate || !ops->deallocate)
    return devmm_set_error(DEVMM_EINVAL,
                           "resource '%.64s': ops.allocate and ops.deallocate "
                           "are required",
                           name);
  devmm_resource *r = calloc(1, sizeof *r);
  char *n = devmm__strdup(name);
  if (!r || !n) {
    free(r);
    free(n);
    return devmm_set_error(DEVMM_ENOMEM, "resource '%.64s': out of host memory", name);
  }
  /* the table is checked once, here, and kept with its defaults filled in (UMF's validateOps):
   * the entry points then call through it without a check of their own */
  size_t sz = ops->struct_size < sizeof r->ops ? ops->struct_size : sizeof r->ops;
  memcpy(&r->ops, ops, sz);
  r->ops.struct_size = sizeof r->ops;
  if (flags & DEVMM_RESOURCE_HOST_ACCESSIBLE) {
    if (!r->ops.copy)
      r->ops.copy = host_copy;
    if (!r->ops.memset)
      r->ops.memset = host_memset;
  }
  r->ctx = ctx;
  r->kind = ops;
  r->device = device;
  r->flags = flags;
  r->name = n;
  r->upstream = upstream ? devmm_resource_retain(upstream) : NULL;
  atomic_init(&r->refs, 1);
  *out = r;
  return DEVMM_OK;
}

int devmm_resource_create(const devmm_resource_ops *ops, void *ctx, devmm_device device,
                          const char *name, unsigned flags, devmm_resource **out) {
  return create(ops, ctx, device, name, flags, NULL, out);
}

int devmm__adaptor_create(const devmm_resource_ops *ops, void *ctx, devmm_resource *upstream,
                          const char *prefix, devmm_resource **out) {
  if (!upstream) {
    if (out)
      *out = NULL;
    return devmm_set_error(DEVMM_EINVAL, "%s adaptor: upstream is NULL", prefix);
  }
  char name[256];
  snprintf(name, sizeof name, "%s(%s)", prefix, upstream->name);
  int rc = create(ops, ctx, upstream->device, name, upstream->flags, upstream, out);
  if (rc == DEVMM_OK)
    (*out)->adaptor = prefix; /* a string literal of the adaptor's source */
  return rc;
}

devmm_resource *devmm_resource_retain(devmm_resource *r) {
  if (r)
    atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
  return r;
}

void devmm_resource_release(devmm_resource *r) {
  if (!r || atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1)
    return;
  if (r->ops.destroy)
    r->ops.destroy(r);
  devmm_resource_release(r->upstream);
  free(r->name);
  free(r);
}

void *devmm_resource_context(const devmm_resource *r) { return r ? r->ctx : NULL; }
devmm_device devmm_resource_device(const devmm_resource *r) {
  devmm_device none = {0, 0};
  return r ? r->device : none;
}
const char *devmm_resource_name(const devmm_resource *r) { return r ? r->name : "(null)"; }
unsigned devmm_resource_flags(const devmm_resource *r) { return r ? r->flags : 0; }
devmm_resource *devmm_resource_upstream(const devmm_resource *r) { return r ? r->upstream : NULL; }
const char *devmm_adaptor_kind(const devmm_resource *r) { return r ? r->adaptor : NULL; }
long devmm_resource_refcount(const devmm_resource *r) { return r ? atomic_load(&r->refs) : 0; }

int devmm__check_kind(const devmm_resource *r, const devmm_resource_ops *kind, const char *what) {
  if (!r)
    return devmm_set_error(DEVMM_EINVAL, "expected a %s, got NULL", what);
  if (r->kind != kind)
    return devmm_set_error(DEVMM_EINVAL, "resource '%s' is not a %s", r->name, what);
  return DEVMM_OK;
}

/* ===================================================================== operations */

/* Everything devmm_allocate refuses or short-cuts, sorted out off the hot path. */
static __attribute__((noinline, cold)) int
allocate_slow(devmm_resource *r, size_t bytes, size_t alignment, devmm_stream stream, void **out) {
  if (!r || !out) {
    if (out)
      *out = NULL;
    return devmm_set_error(DEVMM_EINVAL, "devmm_allocate: %s is NULL", !r ? "resource" : "out");
  }
  *out = NULL;
  if ((alignment & (alignment - 1)) || alignment > DEVMM_MAX_ALIGNMENT)
    return devmm_set_error(DEVMM_EINVAL,
                           "devmm_allocate: alignment %zu is not a power of two up to 2^40 "
                           "(resource '%s')",
                           alignment, r->name);
  if (bytes == 0)
    return DEVMM_OK;
  /* ops never see 0 (resource.h); the report says what the caller asked for */
  int rc = r->ops.allocate(r, bytes, alignment ? alignment : DEVMM_DEFAULT_ALIGNMENT, stream, out);
  return rc == DEVMM_ENOMEM ? devmm__explain_oom(r, bytes, alignment) : rc;
}

/* The hot path: one test of every refusal at once (bitwise, no early exits), the call, one test
 * of its status (ENOMEM is explained by the slow path's twin below). Ops never see alignment 0
 * (resource.h): it becomes DEVMM_DEFAULT_ALIGNMENT (a conditional move, no branch). */
int devmm_allocate(devmm_resource *r, size_t bytes, size_t alignment, devmm_stream stream,
                   void **out) {
  if (DEVMM__UNLIKELY((r == NULL) | (out == NULL) | ((alignment & (alignment - 1)) != 0) |
                      (alignment > DEVMM_MAX_ALIGNMENT) | (bytes == 0)))
    return allocate_slow(r, bytes, alignment, stream, out);
  int rc = r->ops.allocate(r, bytes, alignment ? alignment : DEVMM_DEFAULT_ALIGNMENT, stream, out);
  /* the outermost call explains a refusal once (adaptors call their upstream's ops directly) */
  if (DEVMM__UNLIKELY(rc == DEVMM_ENOMEM))
    return devmm__explain_oom(r, bytes, alignment);
  return rc;
}

int devmm_deallocate(devmm_resource *r, void *ptr, size_t bytes, size_t alignment,
                     devmm_stream stream) {
  if (DEVMM__UNLIKELY((r == NULL) | (ptr == NULL)))
    return r ? DEVMM_OK : devmm_set_error(DEVMM_EINVAL, "devmm_deallocate: resource is NULL");
  return r->ops.deallocate(r, ptr, bytes, alignment ? alignment : DEVMM_DEFAULT_ALIGNMENT, stream);
}

#define DEVMM__OPTIONAL(r, op, what)                                                               \
  do {                                                                                             \
    if (!(r))                                                                                      \
      return devmm_set_error(DEVMM_EINVAL, "devmm_" what ": resource is NULL");                    \
    if (!(r)->ops.op)                                                                              \
      return devmm_set_error(DEVMM_ENOTSUP, "resource '%s' does not support " what, (r)->name);    \
  } while (0)

int devmm_mem_info(devmm_resource *r, size_t *f, size_t *t) {
  DEVMM__OPTIONAL(r, mem_info, "mem_info");
  if (!f || !t)
    return devmm_set_error(DEVMM_EINVAL, "devmm_mem_info: output is NULL");
  return r->ops.mem_info(r, f, t);
}

int devmm_copy(devmm_resource *r, void *dst, const void *src, size_t bytes, devmm_stream stream) {
  DEVMM__OPTIONAL(r, copy, "copy");
  if (!bytes)
    return DEVMM_OK;
  if (!dst || !src)
    return devmm_set_error(DEVMM_EINVAL, "devmm_copy: %s is NULL", !dst ? "dst" : "src");
  return r->ops.copy(r, dst, src, bytes, stream);
}

int devmm_memset(devmm_resource *r, void *dst, int value, size_t bytes, devmm_stream stream) {
  DEVMM__OPTIONAL(r, memset, "memset");
  if (!bytes)
    return DEVMM_OK;
  if (!dst)
    return devmm_set_error(DEVMM_EINVAL, "devmm_memset: dst is NULL");
  return r->ops.memset(r, dst, value, bytes, stream);
}

/* Host memory has no streams; anything else (cuda, cuda_managed, rocm, sim, sim_managed, ...)
 * has. */
int devmm__has_streams(const devmm_resource *r) {
  int32_t t = r->device.device_type;
  return t != DEVMM_DEVICE_CPU && t != DEVMM_DEVICE_CUDA_HOST && t != DEVMM_DEVICE_ROCM_HOST &&
         t != DEVMM_DEVICE_SIM_HOST;
}

/* Whether r's own work (copies, memsets) may be queued on streams: memory on a device with
 * streams, unless the CPU addresses it directly (then a resource without stream ops copies and
 * fills it with the CPU, synchronously: nothing is ever pending). */
static int queues_work(const devmm_resource *r) {
  return devmm__has_streams(r) && !(r->flags & DEVMM_RESOURCE_HOST_ACCESSIBLE);
}

static int missing_stream_op(const devmm_resource *r, const char *what) {
  char dev[32];
  devmm_device_format(r->device, dev, sizeof dev);
  return devmm_set_error(DEVMM_ENOTSUP, "resource '%s' on %s cannot %s", r->name, dev, what);
}

int devmm_stream_wait(devmm_resource *r, devmm_stream waiter, devmm_stream waitee) {
  if (!r)
    return devmm_set_error(DEVMM_EINVAL, "devmm_stream_wait: resource is NULL");
  if (r->ops.stream_wait)
    return r->ops.stream_wait(r, waiter, waitee);
  if (waiter == waitee || !queues_work(r))
    return DEVMM_OK;
  return missing_stream_op(r, "order streams (it has no stream_wait op)");
}

int devmm_synchronize(devmm_resource *r, devmm_stream stream) {
  if (!r)
    return devmm_set_error(DEVMM_EINVAL, "devmm_synchronize: resource is NULL");
  if (r->ops.synchronize)
    return r->ops.synchronize(r, stream);
  if (!queues_work(r))
    return DEVMM_OK;
  return missing_stream_op(r, "wait for its streams (it has no synchronize op)");
}
