/* Statistics adaptor: current/peak/total bytes and counts, lock-free on the hot path.
 *
 * Two layouts of the counters, chosen at creation:
 *  - exact (default): one set of relaxed atomics sharing a cache line. Every figure is exact
 *    and linearisable, like RMM's statistics adaptor, but that line moves between cores on
 *    every operation when several threads allocate at once.
 *  - sharded (DEVMM_STATISTICS_SHARDED): per-thread cache-line shards. Current and total
 *    figures are exact (a read sums the shards); the peak is raised only when a thread's own
 *    shard reaches a new high, so it is exact for one thread and a lower bound when several
 *    threads allocate at once. It scales with threads.
 * Scopes (push/pop, like RMM's push_counters) snapshot the absolute figures under a mutex: a
 * scope's figures are the absolute ones minus its base, and `peak_*` hold the innermost
 * scope's peak in absolute terms, so the hot path never looks at the scope stack. */
#include "../resource/resource_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 1024
#define NSHARDS 64

typedef struct {
  int64_t bytes, count;             /* absolute current at push */
  int64_t total_bytes, total_count; /* absolute totals at push */
  int64_t peak_bytes, peak_count;   /* the enclosing scope's absolute peaks at push */
} scope;

typedef struct {
  _Alignas(DEVMM__CACHELINE) atomic_llong bytes;
  atomic_llong count, total_bytes, total_count;
  atomic_llong high_bytes, high_count; /* sharded: this shard's high-water marks */
} counters;

typedef struct {
  counters c; /* exact mode: the counters; sharded mode: unused */
  _Alignas(DEVMM__CACHELINE) atomic_llong peak_bytes;
  atomic_llong peak_count;
  _Alignas(DEVMM__CACHELINE) pthread_mutex_t lock; /* scopes only */
  int depth;
  scope *stack;     /* stack[0]: the whole-life scope, all zeros */
  counters *shards; /* sharded mode: NSHARDS of them */
} stats;

static inline void raise_max(atomic_llong *m, int64_t v) {
  long long cur = atomic_load_explicit(m, memory_order_relaxed);
  while (v > cur && !atomic_compare_exchange_weak_explicit(m, &cur, v, memory_order_relaxed,
                                                           memory_order_relaxed))
    ;
}

#define ADD(a, v) atomic_fetch_add_explicit(&(a), (v), memory_order_relaxed)
#define LOAD(a) atomic_load_explicit(&(a), memory_order_relaxed)

/* Absolute figures: current and totals. */
static void totals(stats *s, int64_t *b, int64_t *c, int64_t *tb, int64_t *tc) {
  if (!s->shards) {
    *b = LOAD(s->c.bytes), *c = LOAD(s->c.count);
    *tb = LOAD(s->c.total_bytes), *tc = LOAD(s->c.total_count);
    return;
  }
  *b = *c = *tb = *tc = 0;
  for (int i = 0; i < NSHARDS; i++) {
    counters *k = &s->shards[i];
    *b += LOAD(k->bytes), *c += LOAD(k->count);
    *tb += LOAD(k->total_bytes), *tc += LOAD(k->total_count);
  }
}

/* ------------------------------------------------------------------ exact hot path */

static int ex_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream stream,
                       void **out) {
  devmm_resource *up = self->upstream;
  int rc = up->ops.allocate(up, bytes, align, stream, out);
  if (DEVMM__UNLIKELY(rc))
    return rc;
  stats *s = self->ctx;
  int64_t n = (int64_t)bytes;
  raise_max(&s->peak_bytes, ADD(s->c.bytes, n) + n);
  raise_max(&s->peak_count, ADD(s->c.count, 1) + 1);
  ADD(s->c.total_bytes, n);
  ADD(s->c.total_count, 1);
  return DEVMM_OK;
}

static int ex_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                         devmm_stream stream) {
  devmm_resource *up = self->upstream;
  int rc = up->ops.deallocate(up, ptr, bytes, align, stream);
  if (DEVMM__UNLIKELY(rc))
    return rc;
  stats *s = self->ctx;
  ADD(s->c.bytes, -(int64_t)bytes);
  ADD(s->c.count, -1);
  return DEVMM_OK;
}

/* ------------------------------------------------------------------ sharded hot path */

static inline counters *my_shard(stats *s) { return &s->shards[devmm__thread_id() % NSHARDS]; }

static int sh_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream stream,
                       void **out) {
  devmm_resource *up = self->upstream;
  int rc = up->ops.allocate(up, bytes, align, stream, out);
  if (DEVMM__UNLIKELY(rc))
    return rc;
  stats *s = self->ctx;
  counters *k = my_shard(s);
  int64_t n = (int64_t)bytes;
  int64_t b = ADD(k->bytes, n) + n, c = ADD(k->count, 1) + 1;
  ADD(k->total_bytes, n);
  ADD(k->total_count, 1);
  if (DEVMM__UNLIKELY(b > LOAD(k->high_bytes) || c > LOAD(k->high_count))) {
    /* a new high for this shard: the only moment a new global peak can be seen cheaply */
    raise_max(&k->high_bytes, b);
    raise_max(&k->high_count, c);
    int64_t gb, gc, tb, tc;
    totals(s, &gb, &gc, &tb, &tc);
    raise_max(&s->peak_bytes, gb);
    raise_max(&s->peak_count, gc);
  }
  return DEVMM_OK;
}

static int sh_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                         devmm_stream stream) {
  devmm_resource *up = self->upstream;
  int rc = up->ops.deallocate(up, ptr, bytes, align, stream);
  if (DEVMM__UNLIKELY(rc))
    return rc;
  counters *k = my_shard(self->ctx);
  ADD(k->bytes, -(int64_t)bytes);
  ADD(k->count, -1);
  return DEVMM_OK;
}

/* ------------------------------------------------------------------ creation */

static void st_destroy(devmm_resource *self) {
  stats *s = self->ctx;
  pthread_mutex_destroy(&s->lock);
  free(s->stack);
  free(s->shards);
  free(s);
}
static void stats_oom(devmm_resource *self, devmm_oom_report *o); /* below */

static const devmm_resource_ops exact_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = ex_allocate,
    .deallocate = ex_deallocate,
    .mem_info = devmm__forward_mem_info,
    .copy = devmm__forward_copy,
    .memset = devmm__forward_memset,
    .stream_wait = devmm__forward_stream_wait,
    .synchronize = devmm__forward_synchronize,
    .destroy = st_destroy,
};

static const devmm_resource_ops sharded_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = sh_allocate,
    .deallocate = sh_deallocate,
    .mem_info = devmm__forward_mem_info,
    .copy = devmm__forward_copy,
    .memset = devmm__forward_memset,
    .stream_wait = devmm__forward_stream_wait,
    .synchronize = devmm__forward_synchronize,
    .destroy = st_destroy,
};

int devmm_statistics_adaptor_create_ex(devmm_resource *upstream, unsigned flags,
                                       devmm_resource **out) {
  if (out)
    *out = NULL;
  if (flags & ~(unsigned)DEVMM_STATISTICS_SHARDED)
    return devmm_set_error(DEVMM_EINVAL,
                           "statistics adaptor: unknown flags 0x%x (expected "
                           "0 or DEVMM_STATISTICS_SHARDED)",
                           flags);
  int sharded = (flags & DEVMM_STATISTICS_SHARDED) != 0;
  stats *s = aligned_alloc(DEVMM__CACHELINE, sizeof *s);
  scope *stack = calloc(MAX_DEPTH, sizeof *stack);
  counters *shards = sharded ? aligned_alloc(DEVMM__CACHELINE, NSHARDS * sizeof *shards) : NULL;
  if (!s || !stack || (sharded && !shards)) {
    free(s);
    free(stack);
    free(shards);
    return devmm_set_error(DEVMM_ENOMEM, "statistics adaptor: out of host memory");
  }
  memset(s, 0, sizeof *s);
  if (shards)
    memset(shards, 0, NSHARDS * sizeof *shards);
  pthread_mutex_init(&s->lock, NULL);
  s->stack = stack;
  s->shards = shards;
  int rc =
      devmm__adaptor_create(sharded ? &sharded_ops : &exact_ops, s, upstream, "statistics", out);
  if (rc) {
    pthread_mutex_destroy(&s->lock);
    free(stack);
    free(shards);
    free(s);
  } else {
    (*out)->oom = stats_oom;
  }
  return rc;
}

int devmm_statistics_adaptor_create(devmm_resource *upstream, devmm_resource **out) {
  return devmm_statistics_adaptor_create_ex(upstream, 0, out);
}

static int check(devmm_resource *r) {
  if (r && r->kind == &sharded_ops)
    return DEVMM_OK;
  return devmm__check_kind(r, &exact_ops, "statistics adaptor");
}

/* ------------------------------------------------------------------ queries and scopes */

/* Figures of the innermost scope; caller holds the lock. */
static void snapshot(stats *s, devmm_statistics *o) {
  const scope *b = &s->stack[s->depth];
  int64_t cb, cc, tb, tc;
  totals(s, &cb, &cc, &tb, &tc);
  o->current_bytes = cb - b->bytes;
  o->current_count = cc - b->count;
  o->total_bytes = tb - b->total_bytes;
  o->total_count = tc - b->total_count;
  /* in sharded mode a read is also a sample of the peak */
  raise_max(&s->peak_bytes, cb);
  raise_max(&s->peak_count, cc);
  o->peak_bytes = LOAD(s->peak_bytes) - b->bytes;
  o->peak_count = LOAD(s->peak_count) - b->count;
}

/* Lets every shard report its next rise again (after the peak went down). */
static void reset_highs(stats *s) {
  if (s->shards)
    for (int i = 0; i < NSHARDS; i++) {
      atomic_store(&s->shards[i].high_bytes, LOAD(s->shards[i].bytes));
      atomic_store(&s->shards[i].high_count, LOAD(s->shards[i].count));
    }
}

int devmm_statistics_get(devmm_resource *r, devmm_statistics *out) {
  int rc = check(r);
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
  int rc = check(r);
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
  totals(s, &n->bytes, &n->count, &n->total_bytes, &n->total_count);
  /* the new scope's peak starts at its current value (zero relative to its base) */
  n->peak_bytes = atomic_exchange(&s->peak_bytes, n->bytes);
  n->peak_count = atomic_exchange(&s->peak_count, n->count);
  reset_highs(s);
  pthread_mutex_unlock(&s->lock);
  return DEVMM_OK;
}

int devmm_statistics_pop(devmm_resource *r, devmm_statistics *out) {
  int rc = check(r);
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
  int rc = check(r);
  if (rc)
    return rc;
  stats *s = r->ctx;
  pthread_mutex_lock(&s->lock);
  int64_t b, c, tb, tc;
  totals(s, &b, &c, &tb, &tc);
  atomic_store(&s->peak_bytes, b);
  atomic_store(&s->peak_count, c);
  reset_highs(s);
  pthread_mutex_unlock(&s->lock);
  return DEVMM_OK;
}

/* The absolute figures of statistics adaptor r (DEVMM_EINVAL if r is not one), without touching
 * the error message. */
static int peek(devmm_resource *r, devmm_statistics *o) {
  if (!r || (r->kind != &exact_ops && r->kind != &sharded_ops))
    return DEVMM_EINVAL;
  stats *s = r->ctx;
  pthread_mutex_lock(&s->lock);
  totals(s, &o->current_bytes, &o->current_count, &o->total_bytes, &o->total_count);
  raise_max(&s->peak_bytes, o->current_bytes);
  raise_max(&s->peak_count, o->current_count);
  /* the whole life's peak: the innermost scope's, or an enclosing scope's from before its push */
  o->peak_bytes = LOAD(s->peak_bytes);
  o->peak_count = LOAD(s->peak_count);
  for (int i = 1; i <= s->depth; i++) {
    if (s->stack[i].peak_bytes > o->peak_bytes)
      o->peak_bytes = s->stack[i].peak_bytes;
    if (s->stack[i].peak_count > o->peak_count)
      o->peak_count = s->stack[i].peak_count;
  }
  pthread_mutex_unlock(&s->lock);
  return DEVMM_OK;
}

/* Its part of an out-of-memory report (resource/oom.c): what is in use and the peak, replacing a
 * layer's that knows no peak; the outermost statistics layer's figures stay. */
static void stats_oom(devmm_resource *self, devmm_oom_report *o) {
  devmm_statistics s;
  if (o->peak_bytes >= 0 || peek(self, &s) != DEVMM_OK)
    return;
  o->current_bytes = (int64_t)s.current_bytes;
  o->peak_bytes = (int64_t)s.peak_bytes;
  snprintf(o->counted_by, sizeof o->counted_by, "%s", self->name);
}
