/* Three small adaptors: aligned, failure-callback and thread-safe. */
#include "internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* ================================================================ aligned
 * Asks the upstream for the larger alignment first; only if it cannot (DEVMM_ENOTSUP or
 * DEVMM_EINVAL) does it over-allocate and remember aligned -> original in a small hash table. */

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
    sizeof(devmm_resource_ops),
    al_allocate,
    al_deallocate,
    devmm__forward_mem_info,
    devmm__forward_copy,
    devmm__forward_memset,
    devmm__forward_stream_wait,
    devmm__forward_synchronize,
    al_destroy,
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

/* ================================================================ failure callback */

typedef struct {
  devmm_failure_callback cb;
  void *user;
} failure;

static int fc_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream stream,
                       void **out) {
  failure *f = self->ctx;
  devmm_resource *up = self->upstream;
  int rc;
  for (int attempt = 0;; attempt++) {
    rc = up->ops.allocate(up, bytes, align, stream, out);
    if (rc != DEVMM_ENOMEM)
      return rc;
    char msg[DEVMM__MSG_MAX];
    snprintf(msg, sizeof msg, "%s", devmm_last_error());
    if (!f->cb(bytes, attempt, f->user))
      return devmm_set_error(rc,
                             "%s (failure callback gave up after %d "
                             "%s)",
                             msg, attempt + 1, attempt ? "attempts" : "attempt");
  }
}

static int fc_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                         devmm_stream stream) {
  devmm_resource *up = self->upstream;
  return up->ops.deallocate(up, ptr, bytes, align, stream);
}

static void fc_destroy(devmm_resource *self) { free(self->ctx); }

static const devmm_resource_ops failure_ops = {
    sizeof(devmm_resource_ops),
    fc_allocate,
    fc_deallocate,
    devmm__forward_mem_info,
    devmm__forward_copy,
    devmm__forward_memset,
    devmm__forward_stream_wait,
    devmm__forward_synchronize,
    fc_destroy,
};

int devmm_failure_callback_adaptor_create(devmm_resource *upstream, devmm_failure_callback cb,
                                          void *user, devmm_resource **out) {
  if (out)
    *out = NULL;
  if (!cb)
    return devmm_set_error(DEVMM_EINVAL, "failure-callback adaptor: callback is NULL");
  failure *f = malloc(sizeof *f);
  if (!f)
    return devmm_set_error(DEVMM_ENOMEM, "failure-callback adaptor: out of host memory");
  f->cb = cb;
  f->user = user;
  int rc = devmm__adaptor_create(&failure_ops, f, upstream, "failure_callback", out);
  if (rc)
    free(f);
  return rc;
}

/* ================================================================ thread-safe */

#define LOCKED(self, call)                                                                         \
  do {                                                                                             \
    pthread_mutex_t *m_ = (self)->ctx;                                                             \
    pthread_mutex_lock(m_);                                                                        \
    int rc_ = (call);                                                                              \
    pthread_mutex_unlock(m_);                                                                      \
    return rc_;                                                                                    \
  } while (0)

static int ts_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream stream,
                       void **out) {
  LOCKED(self, self->upstream->ops.allocate(self->upstream, bytes, align, stream, out));
}
static int ts_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                         devmm_stream stream) {
  LOCKED(self, self->upstream->ops.deallocate(self->upstream, ptr, bytes, align, stream));
}
static int ts_mem_info(devmm_resource *self, size_t *f, size_t *t) {
  LOCKED(self, devmm__forward_mem_info(self, f, t));
}
static int ts_copy(devmm_resource *self, void *d, const void *s, size_t n, devmm_stream st) {
  LOCKED(self, devmm__forward_copy(self, d, s, n, st));
}
static int ts_memset(devmm_resource *self, void *d, int v, size_t n, devmm_stream st) {
  LOCKED(self, devmm__forward_memset(self, d, v, n, st));
}
static int ts_stream_wait(devmm_resource *self, devmm_stream a, devmm_stream b) {
  LOCKED(self, devmm__forward_stream_wait(self, a, b));
}
static int ts_synchronize(devmm_resource *self, devmm_stream s) {
  LOCKED(self, devmm__forward_synchronize(self, s));
}
static void ts_destroy(devmm_resource *self) {
  pthread_mutex_destroy(self->ctx);
  free(self->ctx);
}

static const devmm_resource_ops thread_safe_ops = {
    sizeof(devmm_resource_ops),
    ts_allocate,
    ts_deallocate,
    ts_mem_info,
    ts_copy,
    ts_memset,
    ts_stream_wait,
    ts_synchronize,
    ts_destroy,
};

int devmm_thread_safe_adaptor_create(devmm_resource *upstream, devmm_resource **out) {
  if (out)
    *out = NULL;
  pthread_mutex_t *m = malloc(sizeof *m);
  if (!m)
    return devmm_set_error(DEVMM_ENOMEM, "thread-safe adaptor: out of host memory");
  pthread_mutex_init(m, NULL);
  int rc = devmm__adaptor_create(&thread_safe_ops, m, upstream, "thread_safe", out);
  if (rc) {
    pthread_mutex_destroy(m);
    free(m);
    return rc;
  }
  (*out)->flags |= DEVMM_RESOURCE_THREAD_SAFE;
  return DEVMM_OK;
}
