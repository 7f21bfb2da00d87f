/* The prefetch adaptor (RMM's prefetch_resource_adaptor): each allocation is prefetched to the
 * device on its stream, through the prefetch op of the nearest layer below that has one (the GPU
 * plugins' managed and system memory); and devmm_prefetch, the op's checked entry point. */
#include "../resource/resource_internal.h"

#include <stdio.h>

/* r, or the nearest layer below it with a prefetch op (adaptors keep their upstream's
 * addresses), or NULL. */
static devmm_resource *prefetcher(devmm_resource *r) {
  while (r && !r->ops.prefetch)
    r = r->upstream;
  return r;
}

static int cannot(const devmm_resource *r, const char *what) {
  return devmm_set_error(DEVMM_ENOTSUP,
                         "%s %s: its memory does not move (prefetch needs managed or system "
                         "memory: <gpu>.managed, <gpu>.system, <gpu>.async with pool = managed)",
                         what, r->name);
}

int devmm_prefetch(devmm_resource *r, const void *ptr, size_t bytes, devmm_stream stream) {
  if (!r)
    return devmm_set_error(DEVMM_EINVAL, "devmm_prefetch: r is NULL");
  devmm_resource *p = prefetcher(r);
  if (!p)
    return cannot(r, "devmm_prefetch on");
  if (!bytes)
    return DEVMM_OK;
  if (!ptr)
    return devmm_set_error(DEVMM_EINVAL, "devmm_prefetch on %s: ptr is NULL", r->name);
  return p->ops.prefetch(p, ptr, bytes, stream);
}

static int pf_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream stream,
                       void **out) {
  devmm_resource *up = self->upstream, *p = self->ctx;
  int rc = up->ops.allocate(up, bytes, align, stream, out);
  if (rc)
    return rc;
  rc = p->ops.prefetch(p, *out, bytes, stream);
  if (rc) { /* the allocation goes back; the prefetch's error is the caller's */
    char why[512];
    snprintf(why, sizeof why, "%s", devmm_last_error());
    up->ops.deallocate(up, *out, bytes, align, stream);
    *out = NULL;
    return devmm_set_error(rc, "%s", why);
  }
  return DEVMM_OK;
}

static int pf_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                         devmm_stream stream) {
  return self->upstream->ops.deallocate(self->upstream, ptr, bytes, align, stream);
}

static int pf_prefetch(devmm_resource *self, const void *ptr, size_t bytes, devmm_stream s) {
  devmm_resource *p = self->ctx;
  return p->ops.prefetch(p, ptr, bytes, s);
}

static const devmm_resource_ops prefetch_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = pf_allocate,
    .deallocate = pf_deallocate,
    .mem_info = devmm__forward_mem_info,
    .copy = devmm__forward_copy,
    .memset = devmm__forward_memset,
    .stream_wait = devmm__forward_stream_wait,
    .synchronize = devmm__forward_synchronize,
    .prefetch = pf_prefetch,
};

int devmm_prefetch_adaptor_create(devmm_resource *upstream, devmm_resource **out) {
  if (out)
    *out = NULL;
  devmm_resource *p = prefetcher(upstream);
  if (upstream && !p)
    return cannot(upstream, "prefetch adaptor over");
  /* ctx: the layer that prefetches, which upstream's chain holds as long as this adaptor */
  return devmm__adaptor_create(&prefetch_ops, p, upstream, "prefetch", out);
}
