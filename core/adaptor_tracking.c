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
#include "internal.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct node {
  uintptr_t ptr;
  size_t bytes;
  struct node *l, *r;
  devmm_stream stream;
  uint32_t prio;
  uint8_t align_log2;
  uint8_t pad_[3];
} node;

typedef struct frames {
  int n;
  void *pc[DEVMM_TRACKING_MAX_FRAMES];
} frames;

/* Per-node extras live beside the node only when an option is on. */
typedef struct {
  node n;
  frames *bt;
  uint64_t tag, t_ns;
  uint32_t tid;
} node_ext;

#define SLAB_BYTES 4096
#define SHARD_BITS 6
#define NSHARDS (1u << SHARD_BITS)

/* One stripe: a treap, its node slabs and its counts, on cache lines of its own. */
typedef struct {
  _Alignas(DEVMM__CACHELINE) devmm__spinlock lock;
  node *root;
  void *free_list;
  void *slabs; /* singly linked through the first word of each slab */
  size_t count, bytes;
  uint32_t seed;
} shard;

typedef struct {
  shard shards[NSHARDS];
  size_t node_size;
  int backtraces, ext;
  devmm_tracking_options opt;
  _Alignas(DEVMM__CACHELINE) pthread_mutex_t ring_lock; /* inside a stripe, never around one */
  devmm_tracking_event *ring; /* history: cap events, the oldest at head */
  size_t ring_cap, ring_head, ring_n;
  uint64_t dropped;
} tracking;

/* The stripe of an allocation starting at p: Fibonacci hashing of the address above its
 * 16-byte granule, so neighbouring allocations (one thread's run from its arena, or a pool's
 * consecutive blocks handed to several threads) spread over every stripe. */
static inline shard *shard_of(tracking *tr, uintptr_t p) {
  uint64_t h = (uint64_t)(p >> 4) * 0x9e3779b97f4a7c15ull;
  return &tr->shards[h >> (64 - SHARD_BITS)];
}

static void lock_all(tracking *tr) {
  for (unsigned i = 0; i < NSHARDS; i++)
    devmm__spin_lock(&tr->shards[i].lock);
}

static void unlock_all(tracking *tr) {
  for (unsigned i = NSHARDS; i-- > 0;)
    devmm__spin_unlock(&tr->shards[i].lock);
}

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

static node *floor_node(node *t, uintptr_t k) {
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
static node *successor(node *t, uintptr_t k) {
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

static node *first(node *t) {
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

/* ------------------------------------------------------------------ ops */

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

static const devmm_resource_ops tracking_ops = {
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
  int rc = devmm__adaptor_create(&tracking_ops, tr, upstream, "tracking", out);
  if (rc) {
    pthread_mutex_destroy(&tr->ring_lock);
    free(ring);
    free(tr);
  }
  return rc;
}

int devmm_tracking_adaptor_create(devmm_resource *upstream, int capture_backtraces,
                                  devmm_resource **out) {
  devmm_tracking_options o = {sizeof o, capture_backtraces, 0, NULL, NULL, NULL, NULL};
  return devmm_tracking_adaptor_create_ex(upstream, &o, out);
}

static void fill_info(const tracking *tr, const node *n, devmm_allocation_info *o) {
  memset(o, 0, sizeof *o);
  o->ptr = (void *)n->ptr;
  o->bytes = n->bytes;
  o->alignment = n->align_log2 ? (size_t)1 << n->align_log2 : 0;
  o->stream = n->stream;
  if (!tr->ext)
    return;
  const node_ext *x = (const node_ext *)n;
  o->thread_id = x->tid;
  o->tag = x->tag;
  o->time_ns = x->t_ns;
  if (x->bt) {
    o->nframes = x->bt->n;
    memcpy(o->frames, x->bt->pc, sizeof(void *) * (size_t)x->bt->n);
  }
}

/* Any allocation containing addr starts at or below it, in one of the shards: the last one at or
 * below addr in each shard is the only candidate there (live allocations do not overlap). The
 * shard of addr itself comes first (a pointer near its allocation's start is usually there); the
 * stripes are taken one at a time, so an allocation live throughout the call is found. */
int devmm_tracking_lookup(devmm_resource *r, const void *addr, devmm_allocation_info *out) {
  int rc = devmm__check_kind(r, &tracking_ops, "tracking adaptor");
  if (rc)
    return rc;
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_tracking_lookup: out is NULL");
  tracking *tr = r->ctx;
  unsigned home = (unsigned)(shard_of(tr, (uintptr_t)addr) - tr->shards);
  int found = 0;
  for (unsigned k = 0; k < NSHARDS && !found; k++) {
    shard *s = &tr->shards[(home + k) % NSHARDS];
    devmm__spin_lock(&s->lock);
    node *n = floor_node(s->root, (uintptr_t)addr);
    found = n && (uintptr_t)addr - n->ptr < (n->bytes ? n->bytes : 1);
    if (found)
      fill_info(tr, n, out);
    devmm__spin_unlock(&s->lock);
  }
  return found ? DEVMM_OK
               : devmm_set_error(DEVMM_ENOENT,
                                 "tracking adaptor '%s': %p is not inside a "
                                 "live allocation",
                                 r->name, addr);
}

/* Totals of every shard; the caller holds every stripe. */
static void totals(const tracking *tr, size_t *count, size_t *bytes) {
  size_t c = 0, b = 0;
  for (unsigned i = 0; i < NSHARDS; i++)
    c += tr->shards[i].count, b += tr->shards[i].bytes;
  *count = c;
  *bytes = b;
}

int devmm_tracking_outstanding(devmm_resource *r, size_t *count, size_t *bytes) {
  int rc = devmm__check_kind(r, &tracking_ops, "tracking adaptor");
  if (rc)
    return rc;
  tracking *tr = r->ctx;
  size_t c, b;
  lock_all(tr);
  totals(tr, &c, &b);
  unlock_all(tr);
  if (count)
    *count = c;
  if (bytes)
    *bytes = b;
  return DEVMM_OK;
}

/* The allocations of one stripe in address order: recursion on the left child only (the treap's
 * depth is O(log n) expected). */
static int walk_tree(const tracking *tr, node *t, int (*fn)(const devmm_allocation_info *, void *),
                     void *user) {
  while (t) {
    int rc = walk_tree(tr, t->l, fn, user);
    if (rc)
      return rc;
    devmm_allocation_info info;
    fill_info(tr, t, &info);
    if ((rc = fn(&info, user)) != 0)
      return rc;
    t = t->r;
  }
  return 0;
}

/* Every live allocation in address order, merging the shards' in-order walks (the next node of
 * a shard is found by a descent, so nothing is allocated and no recursion is needed); the caller
 * holds every stripe. */
static int walk(const tracking *tr, int (*fn)(const devmm_allocation_info *, void *), void *user) {
  node *cur[NSHARDS];
  for (unsigned i = 0; i < NSHARDS; i++)
    cur[i] = first(tr->shards[i].root);
  for (;;) {
    unsigned m = NSHARDS;
    for (unsigned i = 0; i < NSHARDS; i++)
      if (cur[i] && (m == NSHARDS || cur[i]->ptr < cur[m]->ptr))
        m = i;
    if (m == NSHARDS)
      return 0;
    devmm_allocation_info info;
    fill_info(tr, cur[m], &info);
    int rc = fn(&info, user);
    if (rc)
      return rc;
    cur[m] = successor(tr->shards[m].root, cur[m]->ptr);
  }
}

int devmm_tracking_foreach(devmm_resource *r, int (*fn)(const devmm_allocation_info *, void *),
                           void *user) {
  int rc = devmm__check_kind(r, &tracking_ops, "tracking adaptor");
  if (rc)
    return rc;
  if (!fn)
    return devmm_set_error(DEVMM_EINVAL, "devmm_tracking_foreach: fn is NULL");
  tracking *tr = r->ctx;
  lock_all(tr);
  walk(tr, fn, user);
  unlock_all(tr);
  return DEVMM_OK;
}

int devmm_frame_describe(const void *pc, char *buf, size_t cap) {
  if (!buf || !cap)
    return devmm_set_error(DEVMM_EINVAL, "devmm_frame_describe: empty buffer");
  Dl_info di;
  if (!pc || !dladdr(pc, &di) || !di.dli_fname) {
    snprintf(buf, cap, "%p", pc);
    return DEVMM_OK;
  }
  const char *obj = strrchr(di.dli_fname, '/');
  obj = obj ? obj + 1 : di.dli_fname;
  if (di.dli_sname)
    snprintf(buf, cap, "%s(%s+0x%zx)", obj, di.dli_sname,
             (size_t)((uintptr_t)pc - (uintptr_t)di.dli_saddr));
  else
    snprintf(buf, cap, "%s(+0x%zx)", obj, (size_t)((uintptr_t)pc - (uintptr_t)di.dli_fbase));
  return DEVMM_OK;
}

/* A context tag's text, or "" (never calls into a front end that has gone away). */
static size_t describe(const tracking *tr, uint64_t tag, char *buf, size_t cap) {
  buf[0] = '\0';
  if (!tag || !tr->opt.context_describe || !devmm__callbacks_enabled())
    return 0;
  size_t n = tr->opt.context_describe(tr->opt.context_user, tag, buf, cap);
  n = n < cap ? n : cap - 1;
  buf[n] = '\0';
  return n;
}

int devmm_tracking_describe(devmm_resource *r, uint64_t tag, char *buf, size_t cap) {
  int rc = devmm__check_kind(r, &tracking_ops, "tracking adaptor");
  if (rc)
    return rc;
  if (!buf || !cap)
    return devmm_set_error(DEVMM_EINVAL, "devmm_tracking_describe: empty buffer");
  describe(r->ctx, tag, buf, cap);
  return DEVMM_OK;
}

static void report_one(const tracking *tr, const devmm_allocation_info *i, FILE *f) {
  fprintf(f, "  %p  %zu bytes  stream %p", i->ptr, i->bytes, i->stream);
  if (tr->ext)
    fprintf(f, "  thread %llu", (unsigned long long)i->thread_id);
  fputc('\n', f);
  if (i->tag) {
    char text[4096];
    describe(tr, i->tag, text, sizeof text);
    for (char *line = text, *next; *line; line = next) {
      next = strchr(line, '\n');
      next = next ? next + 1 : line + strlen(line);
      fprintf(f, "    %.*s\n", (int)(next - line - (next[-1] == '\n')), line);
    }
  }
  if (i->nframes) {
    char **sym = backtrace_symbols(i->frames, i->nframes);
    for (int k = 0; k < i->nframes; k++)
      fprintf(f, "    #%d %s\n", k, sym ? sym[k] : "?");
    free(sym);
  }
}

static int report_locked(const devmm_allocation_info *i, void *user) {
  void **a = user;
  report_one(a[0], i, a[1]);
  return 0;
}

typedef struct {
  devmm_allocation_info *v;
  size_t n, cap;
} infos;

static int collect(const devmm_allocation_info *i, void *user) {
  infos *c = user;
  if (c->n == c->cap)
    return 1;
  c->v[c->n++] = *i;
  return 0;
}

int devmm_tracking_report(devmm_resource *r, char **out) {
  int rc = devmm__check_kind(r, &tracking_ops, "tracking adaptor");
  if (rc)
    return rc;
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_tracking_report: out is NULL");
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f)
    return devmm_set_error(DEVMM_ENOMEM, "devmm_tracking_report: out of memory");
  tracking *tr = r->ctx;
  size_t count, bytes;
  lock_all(tr);
  totals(tr, &count, &bytes);
  fprintf(f, "%s: %zu outstanding allocations, %zu bytes\n", r->name, count, bytes);
  if (!tr->opt.context_describe) {
    void *args[2] = {tr, f};
    walk(tr, report_locked, args);
    unlock_all(tr);
  } else { /* the describe hook runs under no lock: copy first */
    infos c = {calloc(count ? count : 1, sizeof *c.v), 0, count};
    if (c.v)
      walk(tr, collect, &c);
    unlock_all(tr);
    if (!c.v) {
      fclose(f);
      free(buf);
      return devmm_set_error(DEVMM_ENOMEM, "devmm_tracking_report: out of memory");
    }
    for (size_t k = 0; k < c.n; k++)
      report_one(tr, &c.v[k], f);
    free(c.v);
  }
  fclose(f);
  *out = buf;
  return DEVMM_OK;
}

int devmm_tracking_history(devmm_resource *r, devmm_tracking_event *out, size_t cap, size_t *n,
                           size_t *stored, uint64_t *dropped, uint64_t *now_ns) {
  int rc = devmm__check_kind(r, &tracking_ops, "tracking adaptor");
  if (rc)
    return rc;
  if (!n || (cap && !out))
    return devmm_set_error(DEVMM_EINVAL, "devmm_tracking_history: %s is NULL", !n ? "n" : "out");
  tracking *tr = r->ctx;
  if (!tr->ring_cap)
    return devmm_set_error(DEVMM_ENOTSUP,
                           "tracking adaptor '%s' keeps no history (create it with "
                           "options.history > 0)",
                           r->name);
  pthread_mutex_lock(&tr->ring_lock);
  size_t k = tr->ring_n < cap ? tr->ring_n : cap;
  for (size_t i = 0; i < k; i++)
    out[i] = tr->ring[(tr->ring_head + i) % tr->ring_cap];
  *n = k;
  if (stored)
    *stored = tr->ring_n;
  if (dropped)
    *dropped = tr->dropped;
  pthread_mutex_unlock(&tr->ring_lock);
  if (now_ns)
    *now_ns = devmm__now_ns();
  return DEVMM_OK;
}

/* ------------------------------------------------------------------ for out-of-memory reports */

int devmm__is_tracking(const devmm_resource *r) { return r && r->kind == &tracking_ops; }

/* Larger first; of equal sizes the lower address (the order does not depend on the walk's). */
static int ranks_before(const devmm_allocation_info *a, const devmm_allocation_info *b) {
  return a->bytes > b->bytes || (a->bytes == b->bytes && (uintptr_t)a->ptr < (uintptr_t)b->ptr);
}

static int keep_largest(const devmm_allocation_info *i, void *user) {
  infos *c = user;
  if (c->n == c->cap && !ranks_before(i, &c->v[c->n - 1]))
    return 0;
  size_t k = c->n < c->cap ? c->n++ : c->cap - 1;
  while (k > 0 && ranks_before(i, &c->v[k - 1])) {
    c->v[k] = c->v[k - 1];
    k--;
  }
  c->v[k] = *i;
  return 0;
}

size_t devmm__tracking_largest(devmm_resource *r, devmm_allocation_info *out, size_t n,
                               size_t *count, size_t *bytes) {
  tracking *tr = r->ctx;
  infos c = {out, 0, n};
  lock_all(tr);
  totals(tr, count, bytes);
  if (n)
    for (unsigned i = 0; i < NSHARDS; i++) /* no merge needed: ties are ranked by address */
      walk_tree(tr, tr->shards[i].root, keep_largest, &c);
  unlock_all(tr);
  return c.n;
}

size_t devmm__tracking_describe_tag(devmm_resource *r, uint64_t tag, char *buf, size_t cap) {
  return describe(r->ctx, tag, buf, cap);
}
