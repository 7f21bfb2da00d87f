/* Tracking adaptor: every live allocation in an address-ordered treap, so any pointer inside an
 * allocation finds it, and an outstanding-allocations report.
 *
 * Nodes come from 4 KiB slabs with a free list, 48 bytes each and no per-node malloc header:
 * that is the whole per-allocation metadata unless options are on (backtraces, history, a
 * context hook: then an 80-byte node with thread, time, tag and the frames). One mutex guards
 * the tree and the history ring; lookups are O(log n) expected. */
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

typedef struct {
  pthread_mutex_t lock;
  node *root;
  void *free_list;
  void *slabs; /* singly linked through the first word of each slab */
  size_t node_size;
  size_t count, bytes;
  uint32_t seed;
  int backtraces, ext;
  devmm_tracking_options opt;
  devmm_tracking_event *ring; /* history: cap events, the oldest at head */
  size_t ring_cap, ring_head, ring_n;
  uint64_t dropped;
} tracking;

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

/* ------------------------------------------------------------------ node slabs */

static node *node_get(tracking *tr) {
  if (!tr->free_list) {
    char *slab = malloc(SLAB_BYTES);
    if (!slab)
      return NULL;
    *(void **)slab = tr->slabs;
    tr->slabs = slab;
    size_t first = (sizeof(void *) + 15) & ~(size_t)15;
    for (size_t off = first; off + tr->node_size <= SLAB_BYTES; off += tr->node_size) {
      *(void **)(slab + off) = tr->free_list;
      tr->free_list = slab + off;
    }
  }
  node *n = tr->free_list;
  tr->free_list = *(void **)n;
  return n;
}

static void node_put(tracking *tr, node *n) {
  if (tr->ext)
    free(((node_ext *)n)->bt);
  *(void **)n = tr->free_list;
  tr->free_list = n;
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

static void record(tracking *tr, uint32_t action, const node *n, uint64_t t_ns, uint64_t tid) {
  devmm_tracking_event *e;
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
  pthread_mutex_lock(&tr->lock);
  node *n = node_get(tr);
  if (DEVMM__UNLIKELY(!n)) {
    pthread_mutex_unlock(&tr->lock);
    free(bt);
    up->ops.deallocate(up, *out, bytes, align, stream);
    *out = NULL;
    return devmm_set_error(DEVMM_ENOMEM,
                           "tracking adaptor '%s': out of host memory for "
                           "tracking data",
                           self->name);
  }
  n->ptr = (uintptr_t)*out;
  n->bytes = bytes;
  n->stream = stream;
  n->align_log2 = (uint8_t)(align ? __builtin_ctzl(align) : 0);
  tr->seed = tr->seed * 1664525u + 1013904223u; /* LCG: priorities need not be strong */
  n->prio = tr->seed;
  n->l = n->r = NULL;
  if (tr->ext) {
    node_ext *x = (node_ext *)n;
    x->bt = bt;
    x->tag = tag;
    x->t_ns = t_ns;
    x->tid = (uint32_t)devmm__thread_id();
    if (tr->ring_cap)
      record(tr, DEVMM_LOG_ALLOCATE, n, t_ns, x->tid);
  }
  node *a, *b;
  split(tr->root, n->ptr, &a, &b);
  tr->root = merge(merge(a, n), b);
  tr->count++;
  tr->bytes += bytes;
  pthread_mutex_unlock(&tr->lock);
  return DEVMM_OK;
}

static int tr_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                         devmm_stream stream) {
  tracking *tr = self->ctx;
  uint64_t t_ns = tr->ring_cap ? devmm__now_ns() : 0;
  pthread_mutex_lock(&tr->lock);
  node *n = erase(&tr->root, (uintptr_t)ptr);
  if (DEVMM__UNLIKELY(!n)) {
    pthread_mutex_unlock(&tr->lock);
    return devmm_set_error(DEVMM_EINVAL,
                           "tracking adaptor '%s': %p is not a live "
                           "allocation of this resource (double free or "
                           "foreign pointer); not freed",
                           self->name, ptr);
  }
  if (DEVMM__UNLIKELY(n->bytes != bytes)) {
    size_t was = n->bytes;
    node *a, *b;
    split(tr->root, n->ptr, &a, &b);
    tr->root = merge(merge(a, n), b);
    pthread_mutex_unlock(&tr->lock);
    return devmm_set_error(DEVMM_EINVAL,
                           "tracking adaptor '%s': %p was allocated with %zu "
                           "bytes but freed with %zu; not freed",
                           self->name, ptr, was, bytes);
  }
  if (tr->ring_cap)
    record(tr, DEVMM_LOG_FREE, n, t_ns, devmm__thread_id());
  tr->count--;
  tr->bytes -= n->bytes;
  node_put(tr, n);
  pthread_mutex_unlock(&tr->lock);
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
  if (tr->ext)
    free_frames(tr->root); /* allocations never freed */
  if (tr->opt.context_release && devmm__callbacks_enabled())
    tr->opt.context_release(tr->opt.context_user);
  free(tr->ring);
  while (tr->slabs) {
    void *next = *(void **)tr->slabs;
    free(tr->slabs);
    tr->slabs = next;
  }
  pthread_mutex_destroy(&tr->lock);
  free(tr);
}

static const devmm_resource_ops tracking_ops = {
    sizeof(devmm_resource_ops),
    tr_allocate,
    tr_deallocate,
    devmm__forward_mem_info,
    devmm__forward_copy,
    devmm__forward_memset,
    devmm__forward_stream_wait,
    devmm__forward_synchronize,
    tr_destroy,
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
  tracking *tr = calloc(1, sizeof *tr);
  devmm_tracking_event *ring = opt.history ? calloc(opt.history, sizeof *ring) : NULL;
  if (!tr || (opt.history && !ring)) {
    free(tr);
    free(ring);
    return devmm_set_error(
        DEVMM_ENOMEM, "tracking adaptor: out of host memory (history of %zu events)", opt.history);
  }
  pthread_mutex_init(&tr->lock, NULL);
  tr->opt = opt;
  tr->ring = ring;
  tr->ring_cap = opt.history;
  tr->backtraces = opt.backtraces != 0;
  tr->ext = tr->backtraces || opt.history || opt.context_capture;
  tr->node_size = tr->ext ? sizeof(node_ext) : sizeof(node);
  tr->seed = 0x9e3779b9u;
  if (tr->backtraces) {
    void *warm[1];
    backtrace(warm, 1); /* loads libgcc_s now, not inside the first allocation */
  }
  int rc = devmm__adaptor_create(&tracking_ops, tr, upstream, "tracking", out);
  if (rc) {
    pthread_mutex_destroy(&tr->lock);
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

int devmm_tracking_lookup(devmm_resource *r, const void *addr, devmm_allocation_info *out) {
  int rc = devmm__check_kind(r, &tracking_ops, "tracking adaptor");
  if (rc)
    return rc;
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_tracking_lookup: out is NULL");
  tracking *tr = r->ctx;
  pthread_mutex_lock(&tr->lock);
  node *n = floor_node(tr->root, (uintptr_t)addr);
  int found = n && (uintptr_t)addr - n->ptr < (n->bytes ? n->bytes : 1);
  if (found)
    fill_info(tr, n, out);
  pthread_mutex_unlock(&tr->lock);
  return found ? DEVMM_OK
               : devmm_set_error(DEVMM_ENOENT,
                                 "tracking adaptor '%s': %p is not inside a "
                                 "live allocation",
                                 r->name, addr);
}

int devmm_tracking_outstanding(devmm_resource *r, size_t *count, size_t *bytes) {
  int rc = devmm__check_kind(r, &tracking_ops, "tracking adaptor");
  if (rc)
    return rc;
  tracking *tr = r->ctx;
  pthread_mutex_lock(&tr->lock);
  if (count)
    *count = tr->count;
  if (bytes)
    *bytes = tr->bytes;
  pthread_mutex_unlock(&tr->lock);
  return DEVMM_OK;
}

/* In-order walk: recursion on the left child only; the treap's depth is O(log n) expected. */
static int walk(const tracking *tr, node *t, int (*fn)(const devmm_allocation_info *, void *),
                void *user) {
  while (t) {
    int rc = walk(tr, t->l, fn, user);
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

int devmm_tracking_foreach(devmm_resource *r, int (*fn)(const devmm_allocation_info *, void *),
                           void *user) {
  int rc = devmm__check_kind(r, &tracking_ops, "tracking adaptor");
  if (rc)
    return rc;
  if (!fn)
    return devmm_set_error(DEVMM_EINVAL, "devmm_tracking_foreach: fn is NULL");
  tracking *tr = r->ctx;
  pthread_mutex_lock(&tr->lock);
  walk(tr, tr->root, fn, user);
  pthread_mutex_unlock(&tr->lock);
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
  pthread_mutex_lock(&tr->lock);
  fprintf(f, "%s: %zu outstanding allocations, %zu bytes\n", r->name, tr->count, tr->bytes);
  if (!tr->opt.context_describe) {
    void *args[2] = {tr, f};
    walk(tr, tr->root, report_locked, args);
    pthread_mutex_unlock(&tr->lock);
  } else { /* the describe hook runs under no lock: copy first */
    infos c = {calloc(tr->count ? tr->count : 1, sizeof *c.v), 0, tr->count};
    if (c.v)
      walk(tr, tr->root, collect, &c);
    pthread_mutex_unlock(&tr->lock);
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
  pthread_mutex_lock(&tr->lock);
  size_t k = tr->ring_n < cap ? tr->ring_n : cap;
  for (size_t i = 0; i < k; i++)
    out[i] = tr->ring[(tr->ring_head + i) % tr->ring_cap];
  *n = k;
  if (stored)
    *stored = tr->ring_n;
  if (dropped)
    *dropped = tr->dropped;
  pthread_mutex_unlock(&tr->lock);
  if (now_ns)
    *now_ns = devmm__now_ns();
  return DEVMM_OK;
}

/* ------------------------------------------------------------------ for out-of-memory reports */

int devmm__is_tracking(const devmm_resource *r) { return r && r->kind == &tracking_ops; }

static int keep_largest(const devmm_allocation_info *i, void *user) {
  infos *c = user;
  if (c->n == c->cap && i->bytes <= c->v[c->n - 1].bytes)
    return 0;
  size_t k = c->n < c->cap ? c->n++ : c->cap - 1;
  while (k > 0 && c->v[k - 1].bytes < i->bytes) {
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
  pthread_mutex_lock(&tr->lock);
  *count = tr->count;
  *bytes = tr->bytes;
  if (n)
    walk(tr, tr->root, keep_largest, &c);
  pthread_mutex_unlock(&tr->lock);
  return c.n;
}

size_t devmm__tracking_describe_tag(devmm_resource *r, uint64_t tag, char *buf, size_t cap) {
  return describe(r->ctx, tag, buf, cap);
}
