/* Limiting adaptor: refuses allocations that would take the live bytes over a limit.
 *
 * Scales with threads without a compare-and-swap loop (ADR 29). Bytes are reserved against the
 * limit in one shared count, `reserved`, with a fetch-add whose result says whether they fit
 * (if not, a fetch-sub takes them back): a reservation is only kept when the count it added
 * to, itself included, was within the limit. Each of NSHARDS per-thread shards (a small
 * thread id picks one, as the sharded statistics do) keeps a credit of reserved bytes: an
 * allocation that its shard's credit covers takes it from there, under the shard's own
 * spinlock, and touches no shared cache line; one that it does not reserves its bytes plus a
 * chunk of credit (limit / 512, at most 1 MiB), or its bytes alone, or, failing both, takes
 * every shard's credit back into `reserved` and tries once more before refusing. A free gives
 * its bytes to the freeing thread's shard, which returns what exceeds two chunks.
 *
 * Invariant: committed bytes + every credit <= the reservations kept <= limit. So the bytes of
 * allocations let through never exceed the limit. A request that would have fit can still be
 * refused, for a moment: while other threads hold credit they have not used yet (at most two
 * chunks per shard in use) or have an attempt in flight between its add and its undo. With one
 * thread, or when nobody else is allocating, the figures and the refusals are exact: a refusal
 * first takes all credit back, and the usage it reports is then the committed bytes. */
#include "../resource/resource_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NSHARDS 64
#define CHUNK_MAX ((size_t)1 << 20)

/* Requests above this many bytes (256 TiB with a 64-bit size_t) reserve with a compare-and-swap
 * loop, so that `reserved` never wraps: it exceeds the kept reservations only by attempts in
 * flight, each at most this big, and 2^16 threads would have to be between their add and their
 * undo at once to wrap it. */
#define FAST_MAX (SIZE_MAX >> 16)

typedef struct {
  _Alignas(DEVMM__CACHELINE) devmm__spinlock lock; /* held for a few instructions */
  atomic_size_t credit; /* reserved, not yet allocated; written under lock, read without */
} shard;

typedef struct {
  _Alignas(DEVMM__CACHELINE) atomic_size_t reserved; /* committed bytes + every credit */
  size_t limit, chunk;
  shard shards[NSHARDS];
} limiting;

static inline void lock(shard *s) { devmm__spin_lock(&s->lock); }
static inline void unlock(shard *s) { devmm__spin_unlock(&s->lock); }

#define LOAD(a) atomic_load_explicit(&(a), memory_order_relaxed)

static shard *my_shard(limiting *l) { return &l->shards[devmm__thread_id() % NSHARDS]; }

/* Adds n to `reserved` if the result stays within the limit (n <= limit); 0 if it would not,
 * with *seen the count it found. */
static int reserve(limiting *l, size_t n, size_t *seen) {
  size_t prev;
  if (DEVMM__LIKELY(n <= FAST_MAX)) {
    prev = atomic_fetch_add_explicit(&l->reserved, n, memory_order_relaxed);
    if (DEVMM__LIKELY(prev <= l->limit - n))
      return 1;
    atomic_fetch_sub_explicit(&l->reserved, n, memory_order_relaxed);
  } else {
    prev = LOAD(l->reserved);
    do {
      if (prev > l->limit - n)
        break;
    } while (!atomic_compare_exchange_weak_explicit(&l->reserved, &prev, prev + n,
                                                    memory_order_relaxed, memory_order_relaxed));
    if (prev <= l->limit - n)
      return 1;
  }
  *seen = prev;
  return 0;
}

/* Takes every shard's credit back into `reserved`. */
static void reclaim(limiting *l) {
  for (int i = 0; i < NSHARDS; i++) {
    shard *s = &l->shards[i];
    if (!LOAD(s->credit))
      continue;
    lock(s);
    size_t c = LOAD(s->credit);
    atomic_store_explicit(&s->credit, 0, memory_order_relaxed);
    unlock(s);
    atomic_fetch_sub_explicit(&l->reserved, c, memory_order_relaxed);
  }
}

/* Bytes allocated through the adaptor: what is reserved less the credit not handed out. */
static size_t in_use(limiting *l) {
  size_t credit = 0;
  for (int i = 0; i < NSHARDS; i++)
    credit += LOAD(l->shards[i].credit);
  size_t r = LOAD(l->reserved);
  return r > credit ? r - credit : 0;
}

/* The slow path: reserve bytes (plus a chunk of credit for this shard when they are small). */
static __attribute__((noinline)) int take_slow(limiting *l, shard *s, size_t bytes, size_t *seen) {
  if (bytes > l->limit) {
    *seen = in_use(l);
    return 0;
  }
  if (bytes <= l->chunk && l->chunk <= l->limit - bytes && reserve(l, bytes + l->chunk, seen)) {
    lock(s);
    atomic_store_explicit(&s->credit, LOAD(s->credit) + l->chunk, memory_order_relaxed);
    unlock(s);
    return 1;
  }
  if (reserve(l, bytes, seen))
    return 1;
  reclaim(l); /* refuse only what does not fit once no shard holds credit back */
  if (reserve(l, bytes, seen))
    return 1;
  *seen = in_use(l);
  return 0;
}

/* Gives bytes back: to this shard's credit, which returns what exceeds two chunks. */
static void give(limiting *l, size_t bytes) {
  shard *s = my_shard(l);
  size_t back = bytes;
  if (bytes <= l->chunk) {
    lock(s);
    size_t c = LOAD(s->credit) + bytes;
    back = c > 2 * l->chunk ? c - l->chunk : 0;
    atomic_store_explicit(&s->credit, c - back, memory_order_relaxed);
    unlock(s);
  }
  if (back)
    atomic_fetch_sub_explicit(&l->reserved, back, memory_order_relaxed);
}

static int lim_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream stream,
                        void **out) {
  limiting *l = self->ctx;
  shard *s = my_shard(l);
  int fits = 0;
  lock(s);
  size_t c = LOAD(s->credit);
  if (DEVMM__LIKELY(c >= bytes)) {
    atomic_store_explicit(&s->credit, c - bytes, memory_order_relaxed);
    fits = 1;
  }
  unlock(s);
  size_t seen = 0;
  if (DEVMM__UNLIKELY(!fits) && !take_slow(l, s, bytes, &seen)) {
    *out = NULL;
    return devmm_set_error(DEVMM_ENOMEM,
                           "out of memory: allocating %zu bytes through '%s' "
                           "would exceed its limit of %zu bytes (%zu bytes in "
                           "use)",
                           bytes, self->name, l->limit, seen);
  }
  devmm_resource *up = self->upstream;
  int rc = up->ops.allocate(up, bytes, align, stream, out);
  if (DEVMM__UNLIKELY(rc))
    give(l, bytes);
  return rc;
}

static int lim_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                          devmm_stream stream) {
  devmm_resource *up = self->upstream;
  int rc = up->ops.deallocate(up, ptr, bytes, align, stream);
  if (DEVMM__LIKELY(!rc))
    give(self->ctx, bytes);
  return rc;
}

static int lim_mem_info(devmm_resource *self, size_t *f, size_t *t) {
  limiting *l = self->ctx;
  size_t used = in_use(l);
  size_t uf = SIZE_MAX, ut = SIZE_MAX;
  if (devmm_mem_info(self->upstream, &uf, &ut) != DEVMM_OK)
    devmm_clear_error();
  *t = l->limit < ut ? l->limit : ut;
  size_t left = used < l->limit ? l->limit - used : 0;
  *f = left < uf ? left : uf;
  return DEVMM_OK;
}
static void limiting_oom(devmm_resource *self, devmm_oom_report *o); /* below */

static void lim_destroy(devmm_resource *self) { free(self->ctx); }

static const devmm_resource_ops limiting_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = lim_allocate,
    .deallocate = lim_deallocate,
    .mem_info = lim_mem_info,
    .copy = devmm__forward_copy,
    .memset = devmm__forward_memset,
    .stream_wait = devmm__forward_stream_wait,
    .synchronize = devmm__forward_synchronize,
    .destroy = lim_destroy,
};

int devmm_limiting_adaptor_create(devmm_resource *upstream, size_t limit, devmm_resource **out) {
  limiting *l = aligned_alloc(DEVMM__CACHELINE, sizeof *l);
  if (!l) {
    if (out)
      *out = NULL;
    return devmm_set_error(DEVMM_ENOMEM, "limiting adaptor: out of host memory");
  }
  memset(l, 0, sizeof *l);
  atomic_init(&l->reserved, 0);
  for (int i = 0; i < NSHARDS; i++) {
    atomic_init(&l->shards[i].lock.held, 0);
    atomic_init(&l->shards[i].credit, 0);
  }
  l->limit = limit;
  l->chunk = limit / (8 * NSHARDS) < CHUNK_MAX ? limit / (8 * NSHARDS) : CHUNK_MAX;
  int rc = devmm__adaptor_create(&limiting_ops, l, upstream, "limiting", out);
  if (rc)
    free(l);
  else
    (*out)->oom = limiting_oom;
  return rc;
}

int devmm_limiting_get(devmm_resource *r, size_t *allocated, size_t *limit) {
  int rc = devmm__check_kind(r, &limiting_ops, "limiting adaptor");
  if (rc)
    return rc;
  limiting *l = r->ctx;
  if (allocated)
    *allocated = in_use(l);
  if (limit)
    *limit = l->limit;
  return DEVMM_OK;
}

/* Its part of an out-of-memory report (resource/oom.c): what is in use, unless an outer layer
 * counted already (a statistics layer anywhere in the stack replaces it: it knows the peak). */
static void limiting_oom(devmm_resource *self, devmm_oom_report *o) {
  if (o->counted_by[0])
    return;
  o->current_bytes = (int64_t)in_use(self->ctx);
  snprintf(o->counted_by, sizeof o->counted_by, "%s", self->name);
}
