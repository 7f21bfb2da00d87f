/* Tracking adaptor: every live allocation in an address-ordered treap, so any pointer inside an
 * allocation finds it, and an outstanding-allocations report.
 *
 * The treap is sharded by address (ADR 29): NSHARDS cache-line shards, each a treap, a node
 * slab and its counts under a spinlock of its own; an allocation's shard is a hash of its start
 * address, so allocate and free of one allocation take the same stripe from any thread, and
 * threads working on different addresses rarely meet. A lookup asks every shard for the last
 * allocation starting at or below the address (the one containing it, if any, is in one of
 * them); whole-table reads (outstanding, foreach, report, out-of-memory figures) take every
 * stripe in index order and merge the shards in address order.
 *
 * Nodes come from 4 KiB slabs with a free list, 48 bytes each and no per-node malloc header:
 * that is the whole per-allocation metadata unless options are on (backtraces, history, a
 * context hook: then an 80-byte node with thread, time, tag and the frames). The history ring
 * has a mutex of its own, taken inside a shard's (an event is recorded while its allocation's
 * stripe is held, so its free always follows its allocation); lookups are O(log n) expected
 * per shard. */
#include "tracking_internal.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ the index: treaps and node
 * slabs (in this file, with the ops that use them on every allocation: the compiler inlines them)
 */

/* ------------------------------------------------------------------ treap */

static node *merge(node *a, node *b) {
  if (!a)
    return b;
  if (!b)
    return a;
  if (a->prio > b->prio) {
    a->r = merge(a->r, b);
    return a;
  }
  b->l = merge(a, b->l);
  return b;
}

/* Splits t into keys < k (*a) and keys >= k (*b). */
static void split(node *t, uintptr_t k, node **a, node **b) {
  if (!t) {
    *a = *b = NULL;
  } else if (t->ptr < k) {
    split(t->r, k, &t->r, b);
    *a = t;
  } else {
    split(t->l, k, a, &t->l);
    *b = t;
  }
}

/* Inserts n (l, r and prio unset except prio): descends while the nodes outrank n, then splits
 * the subtree there, so only the nodes below n's place are written (expected O(1) of them),
 * not the whole path as a split at the root would. */
static void insert(node **t, node *n) {
  while (*t && (*t)->prio > n->prio)
    t = n->ptr < (*t)->ptr ? &(*t)->l : &(*t)->r;
  split(*t, n->ptr, &n->l, &n->r);
  *t = n;
}

static node *erase(node **t, uintptr_t k) {
  while (*t && (*t)->ptr != k)
    t = k < (*t)->ptr ? &(*t)->l : &(*t)->r;
  node *found = *t;
  if (found)
    *t = merge(found->l, found->r);
  return found;
}

node *devmm__tr_floor(node *t, uintptr_t k) {
  node *best = NULL;
  while (t) {
    if (t->ptr <= k) {
      best = t;
      t = t->r;
    } else {
      t = t->l;
    }
  }
  return best;
}

/* The first node with a key > k, or NULL. */
node *devmm__tr_successor(node *t, uintptr_t k) {
  node *best = NULL;
  while (t) {
    if (t->ptr > k) {
      best = t;
      t = t->l;
    } else {
      t = t->r;
    }
  }
  return best;
}

node *devmm__tr_first(node *t) {
  if (t)
    while (t->l)
      t = t->l;
  return t;
}

/* ------------------------------------------------------------------ node slabs */

static node *node_get(shard *s, size_t node_size) {
  if (!s->free_list) {
    char *slab = malloc(SLAB_BYTES);
    if (!slab)
      return NULL;
    *(void **)slab = s->slabs;
    s->slabs = slab;
    size_t off0 = (sizeof(void *) + 15) & ~(size_t)15;
    for (size_t off = off0; off + node_size <= SLAB_BYTES; off += node_size) {
      *(void **)(slab + off) = s->free_list;
      s->free_list = slab + off;
    }
  }
  node *n = s->free_list;
  s->free_list = *(void **)n;
  return n;
}

static void node_put(const tracking *tr, shard *s, node *n) {
  if (tr->ext)
    free(((node_ext *)n)->bt);
  *(void **)n = s->free_list;
  s->free_list = n;
}

/* ------------------------------------------------------------------ devmm's own frames */

static uintptr_t self_lo, self_hi; /* libdevmm's executable segment */

static int find_self(struct dl_phdr_info *info, size_t size, void *base) {
  (void)size;
  if ((void *)info->dlpi_addr != base)
    return 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
      self_lo = info->dlpi_addr + ph->p_vaddr;
      self_hi = self_lo + ph->p_memsz;
    }
  }
  return 1;
}

static pthread_once_t self_once = PTHREAD_ONCE_INIT;
static void init_self(void) {
  Dl_info di;
  if (dladdr((void *)&devmm_tracking_adaptor_create_ex, &di) && di.dli_fbase)
    dl_iterate_phdr(find_self, di.dli_fbase);
}

/* A backtrace without its leading frames inside libdevmm: frame 0 is the caller of devmm. */
static frames *capture_frames(void) {
  void *raw[DEVMM_TRACKING_MAX_FRAMES + 8];
  frames *bt = malloc(sizeof *bt);
  if (!bt)
    return NULL;
  int n = backtrace(raw, DEVMM_TRACKING_MAX_FRAMES + 8), skip = 0;
  pthread_once(&self_once, init_self);
#define IN_SELF(pc) ((uintptr_t)(pc) >= self_lo && (uintptr_t)(pc) < self_hi)
  while (skip < n && !IN_SELF(raw[skip])) /* a sanitizer's backtrace interceptor */
    skip++;
  if (skip == n)
    skip = 0;
  while (skip < n - 1 && IN_SELF(raw[skip]))
    skip++;
#undef IN_SELF
  bt->n = n - skip < DEVMM_TRACKING_MAX_FRAMES ? n - skip : DEVMM_TRACKING_MAX_FRAMES;
  memcpy(bt->pc, raw + skip, sizeof(void *) * (size_t)bt->n);
  return bt;
}

/* ------------------------------------------------------------------ history */

/* Appends an event; the caller holds the allocation's stripe (so a free's event always follows
 * its allocation's), this takes the ring's own lock. */
static void record(tracking *tr, uint32_t action, const node *n, uint64_t t_ns, uint64_t tid) {
  devmm_tracking_event *e;
  pthread_mutex_lock(&tr->ring_lock);
  if (tr->ring_n < tr->ring_cap) {
    e = &tr->ring[(tr->ring_head + tr->ring_n++) % tr->ring_cap];
  } else {
    e = &tr->ring[tr->ring_head];
    tr->ring_head = (tr->ring_head + 1) % tr->ring_cap;
    tr->dropped++;
  }
  e->time_ns = t_ns;
  e->ptr = (void *)n->ptr;
  e->bytes = n->bytes;
  e->stream = n->stream;
  e->thread_id = tid;
  e->tag = ((const node_ext *)n)->tag;
  e->action = action;
  e->reserved_ = 0;
  pthread_mutex_unlock(&tr->ring_lock);
}

/* ------------------------------------------------------------------ ops */

static int tr_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream stream,
                       void **out) {
  tracking *tr = self->ctx;
  frames *bt = tr->backtraces ? capture_frames() : NULL;
  devmm_resource *up = self->upstream;
  int rc = up->ops.allocate(up, bytes, align, stream, out);
  if (DEVMM__UNLIKELY(rc)) {
    free(bt);
    return rc;
  }
  uint64_t tag = 0, t_ns = 0;
  if (tr->ext) {
    if (tr->opt.context_capture && devmm__callbacks_enabled())
      tag = tr->opt.context_capture(tr->opt.context_user, bytes);
    t_ns = devmm__now_ns();
  }
  uintptr_t p = (uintptr_t)*out;
  shard *s = shard_of(tr, p);
  devmm__spin_lock(&s->lock);
  node *n = node_get(s, tr->node_size);
  if (DEVMM__UNLIKELY(!n)) {
    devmm__spin_unlock(&s->lock);
    free(bt);
    up->ops.deallocate(up, *out, bytes, align, stream);
    *out = NULL;
    return devmm_set_error(DEVMM_ENOMEM,
                           "tracking adaptor '%s': out of host memory for "
                           "tracking data",
                           self->name);
  }
  n->ptr = p;
  n->bytes = bytes;
  n->stream = stream;
  n->align_log2 = (uint8_t)(align ? __builtin_ctzl(align) : 0);
  s->seed = s->seed * 1664525u + 1013904223u; /* LCG: priorities need not be strong */
  n->prio = s->seed;
  if (tr->ext) {
    node_ext *x = (node_ext *)n;
    x->bt = bt;
    x->tag = tag;
    x->t_ns = t_ns;
    x->tid = (uint32_t)devmm__thread_id();
    if (tr->ring_cap)
      record(tr, DEVMM_LOG_ALLOCATE, n, t_ns, x->tid);
  }
  insert(&s->root, n);
  s->count++;
  s->bytes += bytes;
  devmm__spin_unlock(&s->lock);
  return DEVMM_OK;
}

static int tr_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                         devmm_stream stream) {
  tracking *tr = self->ctx;
  uint64_t t_ns = tr->ring_cap ? devmm__now_ns() : 0;
  shard *s = shard_of(tr, (uintptr_t)ptr);
  devmm__spin_lock(&s->lock);
  node *n = erase(&s->root, (uintptr_t)ptr);
  if (DEVMM__UNLIKELY(!n)) {
    devmm__spin_unlock(&s->lock);
    return devmm_set_error(DEVMM_EINVAL,
                           "tracking adaptor '%s': %p is not a live "
                           "allocation of this resource (double free or "
                           "foreign pointer); not freed",
                           self->name, ptr);
  }
  if (DEVMM__UNLIKELY(n->bytes != bytes)) {
    size_t was = n->bytes;
    insert(&s->root, n);
    devmm__spin_unlock(&s->lock);
    return devmm_set_error(DEVMM_EINVAL,
                           "tracking adaptor '%s': %p was allocated with %zu "
                           "bytes but freed with %zu; not freed",
                           self->name, ptr, was, bytes);
  }
  if (tr->ring_cap)
    record(tr, DEVMM_LOG_FREE, n, t_ns, devmm__thread_id());
  s->count--;
  s->bytes -= n->bytes;
  node_put(tr, s, n);
  devmm__spin_unlock(&s->lock);
  devmm_resource *up = self->upstream;
  return up->ops.deallocate(up, ptr, bytes, align, stream);
}

static void free_frames(node *t) {
  for (; t; t = t->r) {
    free_frames(t->l);
    free(((node_ext *)t)->bt);
  }
}

static void tr_destroy(devmm_resource *self) {
  tracking *tr = self->ctx;
  if (tr->opt.context_release && devmm__callbacks_enabled())
    tr->opt.context_release(tr->opt.context_user);
  free(tr->ring);
  for (unsigned i = 0; i < NSHARDS; i++) {
    shard *s = &tr->shards[i];
    if (tr->ext)
      free_frames(s->root); /* allocations never freed */
    while (s->slabs) {
      void *next = *(void **)s->slabs;
      free(s->slabs);
      s->slabs = next;
    }
  }
  pthread_mutex_destroy(&tr->ring_lock);
  free(tr);
}
const devmm_resource_ops devmm__tracking_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = tr_allocate,
    .deallocate = tr_deallocate,
    .mem_info = devmm__forward_mem_info,
    .copy = devmm__forward_copy,
    .memset = devmm__forward_memset,
    .stream_wait = devmm__forward_stream_wait,
    .synchronize = devmm__forward_synchronize,
    .destroy = tr_destroy,
};

int devmm_tracking_adaptor_create_ex(devmm_resource *upstream, const devmm_tracking_options *o,
                                     devmm_resource **out) {
  devmm_tracking_options opt = {0};
  if (out)
    *out = NULL;
  if (o) {
    if (o->struct_size < offsetof(devmm_tracking_options, context_capture) ||
        o->struct_size > sizeof opt * 4)
      return devmm_set_error(DEVMM_EINVAL,
                             "tracking adaptor: options.struct_size %zu is not a "
                             "devmm_tracking_options size (expected %zu)",
                             o->struct_size, sizeof opt);
    memcpy(&opt, o, o->struct_size < sizeof opt ? o->struct_size : sizeof opt);
    if (opt.history > ((size_t)1 << 32))
      return devmm_set_error(DEVMM_EINVAL,
                             "tracking adaptor: history of %zu events: at most 2^32 "
                             "(%zu bytes each)",
                             opt.history, sizeof(devmm_tracking_event));
    if (!opt.context_capture && (opt.context_describe || opt.context_release))
      return devmm_set_error(DEVMM_EINVAL, "tracking adaptor: a context describe or release "
                                           "hook without a capture hook");
  }
  tracking *tr = aligned_alloc(DEVMM__CACHELINE, sizeof *tr);
  devmm_tracking_event *ring = opt.history ? calloc(opt.history, sizeof *ring) : NULL;
  if (!tr || (opt.history && !ring)) {
    free(tr);
    free(ring);
    return devmm_set_error(
        DEVMM_ENOMEM, "tracking adaptor: out of host memory (history of %zu events)", opt.history);
  }
  memset(tr, 0, sizeof *tr);
  for (unsigned i = 0; i < NSHARDS; i++) {
    atomic_init(&tr->shards[i].lock.held, 0);
    tr->shards[i].seed = 0x9e3779b9u + i;
  }
  pthread_mutex_init(&tr->ring_lock, NULL);
  tr->opt = opt;
  tr->ring = ring;
  tr->ring_cap = opt.history;
  tr->backtraces = opt.backtraces != 0;
  tr->ext = tr->backtraces || opt.history || opt.context_capture;
  tr->node_size = tr->ext ? sizeof(node_ext) : sizeof(node);
  if (tr->backtraces) {
    void *warm[1];
    backtrace(warm, 1); /* loads libgcc_s now, not inside the first allocation */
  }
  int rc = devmm__adaptor_create(&devmm__tracking_ops, tr, upstream, "tracking", out);
  if (rc) {
    pthread_mutex_destroy(&tr->ring_lock);
    free(ring);
    free(tr);
  } else {
    (*out)->oom = devmm__tracking_oom;
  }
  return rc;
}

int devmm_tracking_adaptor_create(devmm_resource *upstream, int capture_backtraces,
                                  devmm_resource **out) {
  devmm_tracking_options o = {sizeof o, capture_backtraces, 0, NULL, NULL, NULL, NULL};
  return devmm_tracking_adaptor_create_ex(upstream, &o, out);
}
