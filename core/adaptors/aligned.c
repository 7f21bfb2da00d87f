/* The aligned adaptor: asks the upstream for the larger alignment first; only if it cannot
 * (DEVMM_ENOTSUP or DEVMM_EINVAL) does it over-allocate and remember aligned -> original in a
 * small hash table. */
#include "../resource/resource_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct moved {
  uintptr_t aligned, raw;
  size_t raw_bytes, raw_align;
  struct moved *next;
} moved;

#define NBUCKETS 256

typedef struct {
  size_t alignment, threshold;
  pthread_mutex_t lock;
  moved *buckets[NBUCKETS];
} aligned;

static size_t bucket(uintptr_t p) { return (p >> 6) * 0x9E3779B97F4A7C15ull >> 56; }

static int al_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream stream,
                       void **out) {
  aligned *a = self->ctx;
  devmm_resource *up = self->upstream;
  if (bytes < a->threshold || align >= a->alignment)
    return up->ops.allocate(up, bytes, align, stream, out);
  int rc = up->ops.allocate(up, bytes, a->alignment, stream, out);
  if (rc != DEVMM_ENOTSUP && rc != DEVMM_EINVAL)
    return rc;
  devmm_clear_error();
  moved *m = malloc(sizeof *m);
  size_t raw_bytes;
  if (!m || __builtin_add_overflow(bytes, a->alignment, &raw_bytes)) {
    free(m);
    return devmm_set_error(m ? DEVMM_EOVERFLOW : DEVMM_ENOMEM,
                           "aligned adaptor '%s': cannot over-allocate %zu "
                           "bytes",
                           self->name, bytes);
  }
  void *raw;
  if ((rc = up->ops.allocate(up, raw_bytes, align, stream, &raw)) != 0) {
    free(m);
    *out = NULL;
    return rc;
  }
  m->raw = (uintptr_t)raw;
  m->raw_bytes = raw_bytes;
  m->raw_align = align;
  m->aligned = (m->raw + a->alignment - 1) & ~(uintptr_t)(a->alignment - 1);
  pthread_mutex_lock(&a->lock);
  size_t b = bucket(m->aligned);
  m->next = a->buckets[b];
  a->buckets[b] = m;
  pthread_mutex_unlock(&a->lock);
  *out = (void *)m->aligned;
  return DEVMM_OK;
}

static int al_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                         devmm_stream stream) {
  aligned *a = self->ctx;
  devmm_resource *up = self->upstream;
  moved *m = NULL;
  if (bytes >= a->threshold && align < a->alignment) {
    pthread_mutex_lock(&a->lock);
    for (moved **pp = &a->buckets[bucket((uintptr_t)ptr)]; *pp; pp = &(*pp)->next)
      if ((*pp)->aligned == (uintptr_t)ptr) {
        m = *pp;
        *pp = m->next;
        break;
      }
    pthread_mutex_unlock(&a->lock);
    if (!m)
      return up->ops.deallocate(up, ptr, bytes, a->alignment, stream);
  }
  if (!m)
    return up->ops.deallocate(up, ptr, bytes, align, stream);
  int rc = up->ops.deallocate(up, (void *)m->raw, m->raw_bytes, m->raw_align, stream);
  free(m);
  return rc;
}

static void al_destroy(devmm_resource *self) {
  aligned *a = self->ctx;
  for (size_t i = 0; i < NBUCKETS; i++)
    while (a->buckets[i]) {
      moved *m = a->buckets[i];
      a->buckets[i] = m->next;
      free(m);
    }
  pthread_mutex_destroy(&a->lock);
  free(a);
}

static const devmm_resource_ops aligned_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = al_allocate,
    .deallocate = al_deallocate,
    .mem_info = devmm__forward_mem_info,
    .copy = devmm__forward_copy,
    .memset = devmm__forward_memset,
    .stream_wait = devmm__forward_stream_wait,
    .synchronize = devmm__forward_synchronize,
    .destroy = al_destroy,
};

int devmm_aligned_adaptor_create(devmm_resource *upstream, size_t alignment, size_t threshold,
                                 devmm_resource **out) {
  if (out)
    *out = NULL;
  if (!alignment || (alignment & (alignment - 1)))
    return devmm_set_error(DEVMM_EINVAL,
                           "aligned adaptor: alignment %zu is not a power of "
                           "two",
                           alignment);
  if (alignment > DEVMM_MAX_ALIGNMENT) /* every allocation would fail (test_first_hour) */
    return devmm_set_error(DEVMM_EINVAL,
                           "aligned adaptor: alignment %zu is above devmm's largest, %zu (1 TiB, "
                           "DEVMM_MAX_ALIGNMENT): expected a power of two up to it",
                           alignment, DEVMM_MAX_ALIGNMENT);
  aligned *a = calloc(1, sizeof *a);
  if (!a)
    return devmm_set_error(DEVMM_ENOMEM, "aligned adaptor: out of host memory");
  a->alignment = alignment;
  a->threshold = threshold;
  pthread_mutex_init(&a->lock, NULL);
  int rc = devmm__adaptor_create(&aligned_ops, a, upstream, "aligned", out);
  if (rc) {
    pthread_mutex_destroy(&a->lock);
    free(a);
  }
  return rc;
}
