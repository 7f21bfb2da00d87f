/* Statistics adaptor: current/peak/total bytes and counts, lock-free on the hot path.
 *
 * The hot path updates absolute counters with relaxed atomics that share one cache line (one
 * line moves between cores per operation, not six). Scopes (push/pop, like RMM's
 * push_counters) only snapshot those counters under a mutex: a scope's figures are the
 * absolute ones minus its base, and `scope_peak` is the innermost scope's peak in absolute
 * bytes, so the hot path never looks at the scope stack. */
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>

#define MAX_DEPTH 1024

typedef struct {
  int64_t bytes, count;             /* absolute current at push */
  int64_t total_bytes, total_count; /* absolute totals at push */
  int64_t peak_bytes, peak_count;   /* the enclosing scope's absolute peaks at push */
} scope;

typedef struct {
  _Alignas(DEVMM__CACHELINE) atomic_llong cur_bytes;
  atomic_llong cur_count, tot_bytes, tot_count, peak_bytes, peak_count;
  _Alignas(DEVMM__CACHELINE) pthread_mutex_t lock; /* scopes only */
  int depth;
  scope *stack; /* stack[0] is the base of the whole-life scope: all zeros */
} stats;

static inline void raise_max(atomic_llong *m, int64_t v) {
  int64_t cur = atomic_load_explicit(m, memory_order_relaxed);
  while (v > cur && !atomic_compare_exchange_weak_explicit(
                        m, &cur, v, memory_order_relaxed, memory_order_relaxed))
    ;
}

static int st_allocate(devmm_resource *self, size_t bytes, size_t align,
                       devmm_stream stream, void **out) {
  devmm_resource *up = self->upstream;
  int rc = up->ops.allocate(up, bytes, align, stream, out);
  if (DEVMM__UNLIKELY(rc))
    return rc;
  stats *s = self->ctx;
  int64_t n = (int64_t)bytes;
  raise_max(&s->peak_bytes,
            atomic_fetch_add_explicit(&s->cur_bytes, n, memory_order_relaxed) + n);
  raise_max(&s->peak_count,
            atomic_fetch_add_explicit(&s->cur_count, 1, memory_order_relaxed) + 1);
  atomic_fetch_add_explicit(&s->tot_bytes, n, memory_order_relaxed);
  atomic_fetch_add_explicit(&s->tot_count, 1, memory_order_relaxed);
  return DEVMM_OK;
}

static int st_deallocate(devmm_resource *self, void *ptr, size_t bytes,
                         size_t align, devmm_stream stream) {
  devmm_resource *up = self->upstream;
  int rc = up->ops.deallocate(up, ptr, bytes, align, stream);
  if (DEVMM__UNLIKELY(rc))
    return rc;
  stats *s = self->ctx;
  atomic_fetch_sub_explicit(&s->cur_bytes, (int64_t)bytes, memory_order_relaxed);
  atomic_fetch_sub_explicit(&s->cur_count, 1, memory_order_relaxed);
  return DEVMM_OK;
}

static void st_destroy(devmm_resource *self) {
  stats *s = self->ctx;
  pthread_mutex_destroy(&s->lock);
  free(s->stack);
  free(s);
}

static const devmm_resource_ops statistics_ops = {
    sizeof(devmm_resource_ops), st_allocate, st_deallocate,
    devmm__forward_mem_info,    devmm__forward_copy,
    devmm__forward_memset,      devmm__forward_stream_wait,
    devmm__forward_synchronize, st_destroy,
};

int devmm_statistics_adaptor_create(devmm_resource *upstream,
                                    devmm_resource **out) {
  stats *s = aligned_alloc(DEVMM__CACHELINE, sizeof *s);
  scope *stack = calloc(MAX_DEPTH, sizeof *stack);
  if (!s || !stack) {
    free(s);
    free(stack);
    if (out)
      *out = NULL;
    return devmm_set_error(DEVMM_ENOMEM, "statistics adaptor: out of host memory");
  }
  atomic_init(&s->cur_bytes, 0);
  atomic_init(&s->cur_count, 0);
  atomic_init(&s->tot_bytes, 0);
  atomic_init(&s->tot_count, 0);
  atomic_init(&s->peak_bytes, 0);
  atomic_init(&s->peak_count, 0);
  pthread_mutex_init(&s->lock, NULL);
  s->depth = 0;
  s->stack = stack;
  int rc = devmm__adaptor_create(&statistics_ops, s, upstream, "statistics", out);
  if (rc) {
    pthread_mutex_destroy(&s->lock);
    free(stack);
    free(s);
  }
  return rc;
}

/* Figures of the innermost scope; caller holds the lock. */
static void snapshot(stats *s, devmm_statistics *o) {
  const scope *b = &s->stack[s->depth];
  o->current_bytes = atomic_load(&s->cur_bytes) - b->bytes;
  o->current_count = atomic_load(&s->cur_count) - b->count;
  o->total_bytes = atomic_load(&s->tot_bytes) - b->total_bytes;
  o->total_count = atomic_load(&s->tot_count) - b->total_count;
  o->peak_bytes = atomic_load(&s->peak_bytes) - b->bytes;
  o->peak_count = atomic_load(&s->peak_count) - b->count;
}

int devmm_statistics_get(devmm_resource *r, devmm_statistics *out) {
  int rc = devmm__check_kind(r, &statistics_ops, "statistics adaptor");
  if (rc)
    return rc;
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_statistics_get: out is NULL");
  stats *s = r->ctx;
  pthread_mutex_lock(&s->lock);
  snapshot(s, out);
  pthread_mutex_unlock(&s->lock);
  return DEVMM_OK;
}

int devmm_statistics_push(devmm_resource *r) {
  int rc = devmm__check_kind(r, &statistics_ops, "statistics adaptor");
  if (rc)
    return rc;
  stats *s = r->ctx;
  pthread_mutex_lock(&s->lock);
  if (s->depth + 1 >= MAX_DEPTH) {
    pthread_mutex_unlock(&s->lock);
    return devmm_set_error(DEVMM_ESTATE,
                           "statistics adaptor '%s': more than %d nested "
                           "scopes (is a pop missing?)",
                           r->name, MAX_DEPTH - 1);
  }
  scope *n = &s->stack[++s->depth];
  n->bytes = atomic_load(&s->cur_bytes);
  n->count = atomic_load(&s->cur_count);
  n->total_bytes = atomic_load(&s->tot_bytes);
  n->total_count = atomic_load(&s->tot_count);
  /* the new scope's peak starts at its current value (zero relative to its base) */
  n->peak_bytes = atomic_exchange(&s->peak_bytes, n->bytes);
  n->peak_count = atomic_exchange(&s->peak_count, n->count);
  pthread_mutex_unlock(&s->lock);
  return DEVMM_OK;
}

int devmm_statistics_pop(devmm_resource *r, devmm_statistics *out) {
  int rc = devmm__check_kind(r, &statistics_ops, "statistics adaptor");
  if (rc)
    return rc;
  stats *s = r->ctx;
  pthread_mutex_lock(&s->lock);
  if (s->depth == 0) {
    pthread_mutex_unlock(&s->lock);
    return devmm_set_error(DEVMM_ESTATE,
                           "statistics adaptor '%s': pop without a matching "
                           "push",
                           r->name);
  }
  devmm_statistics inner;
  snapshot(s, &inner);
  const scope *b = &s->stack[s->depth--];
  /* merge: the outer peak is the larger of its own and the inner one */
  raise_max(&s->peak_bytes, b->peak_bytes);
  raise_max(&s->peak_count, b->peak_count);
  pthread_mutex_unlock(&s->lock);
  if (out)
    *out = inner;
  return DEVMM_OK;
}

int devmm_statistics_reset_peak(devmm_resource *r) {
  int rc = devmm__check_kind(r, &statistics_ops, "statistics adaptor");
  if (rc)
    return rc;
  stats *s = r->ctx;
  pthread_mutex_lock(&s->lock);
  atomic_store(&s->peak_bytes, atomic_load(&s->cur_bytes));
  atomic_store(&s->peak_count, atomic_load(&s->cur_count));
  pthread_mutex_unlock(&s->lock);
  return DEVMM_OK;
}
