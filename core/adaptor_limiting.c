/* Limiting adaptor: refuses allocations that would take the live bytes over a limit. */
#include "internal.h"

#include <stdlib.h>

typedef struct {
  atomic_size_t allocated;
  size_t limit;
} limiting;

static int lim_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream stream,
                        void **out) {
  limiting *l = self->ctx;
  size_t prev = atomic_fetch_add_explicit(&l->allocated, bytes, memory_order_relaxed);
  if (DEVMM__UNLIKELY(bytes > l->limit || prev > l->limit - bytes)) {
    atomic_fetch_sub_explicit(&l->allocated, bytes, memory_order_relaxed);
    *out = NULL;
    return devmm_set_error(DEVMM_ENOMEM,
                           "out of memory: allocating %zu bytes through '%s' "
                           "would exceed its limit of %zu bytes (%zu bytes in "
                           "use)",
                           bytes, self->name, l->limit, prev);
  }
  devmm_resource *up = self->upstream;
  int rc = up->ops.allocate(up, bytes, align, stream, out);
  if (DEVMM__UNLIKELY(rc))
    atomic_fetch_sub_explicit(&l->allocated, bytes, memory_order_relaxed);
  return rc;
}

static int lim_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                          devmm_stream stream) {
  devmm_resource *up = self->upstream;
  int rc = up->ops.deallocate(up, ptr, bytes, align, stream);
  if (DEVMM__LIKELY(!rc))
    atomic_fetch_sub_explicit(&((limiting *)self->ctx)->allocated, bytes, memory_order_relaxed);
  return rc;
}

static int lim_mem_info(devmm_resource *self, size_t *f, size_t *t) {
  limiting *l = self->ctx;
  size_t used = atomic_load(&l->allocated);
  size_t uf = SIZE_MAX, ut = SIZE_MAX;
  if (devmm_mem_info(self->upstream, &uf, &ut) != DEVMM_OK)
    devmm_clear_error();
  *t = l->limit < ut ? l->limit : ut;
  size_t left = used < l->limit ? l->limit - used : 0;
  *f = left < uf ? left : uf;
  return DEVMM_OK;
}

static void lim_destroy(devmm_resource *self) { free(self->ctx); }

static const devmm_resource_ops limiting_ops = {
    sizeof(devmm_resource_ops),
    lim_allocate,
    lim_deallocate,
    lim_mem_info,
    devmm__forward_copy,
    devmm__forward_memset,
    devmm__forward_stream_wait,
    devmm__forward_synchronize,
    lim_destroy,
};

int devmm_limiting_adaptor_create(devmm_resource *upstream, size_t limit, devmm_resource **out) {
  limiting *l = malloc(sizeof *l);
  if (!l) {
    if (out)
      *out = NULL;
    return devmm_set_error(DEVMM_ENOMEM, "limiting adaptor: out of host memory");
  }
  atomic_init(&l->allocated, 0);
  l->limit = limit;
  int rc = devmm__adaptor_create(&limiting_ops, l, upstream, "limiting", out);
  if (rc)
    free(l);
  return rc;
}

int devmm_limiting_get(devmm_resource *r, size_t *allocated, size_t *limit) {
  int rc = devmm__check_kind(r, &limiting_ops, "limiting adaptor");
  if (rc)
    return rc;
  limiting *l = r->ctx;
  if (allocated)
    *allocated = atomic_load(&l->allocated);
  if (limit)
    *limit = l->limit;
  return DEVMM_OK;
}

int devmm__limiting_peek(devmm_resource *r, size_t *allocated, size_t *limit) {
  if (!r || r->kind != &limiting_ops)
    return DEVMM_EINVAL;
  limiting *l = r->ctx;
  *allocated = atomic_load(&l->allocated);
  *limit = l->limit;
  return DEVMM_OK;
}
