/* Tracking adaptor: every live allocation in an address-ordered treap, so any pointer inside an
 * allocation finds it, and an outstanding-allocations report.
 *
 * Nodes come from 4 KiB slabs with a free list, 48 bytes each and no per-node malloc header:
 * that is the whole per-allocation metadata unless backtraces are on (then + the frames). One
 * mutex guards the tree; lookups are O(log n) expected. */
#include "internal.h"

#include <execinfo.h>
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
  uint32_t tid;
  void *pc[DEVMM_TRACKING_MAX_FRAMES];
} frames;

/* Per-node extras live beside the node only when backtraces are on. */
typedef struct {
  node n;
  frames *bt;
} node_bt;

#define SLAB_BYTES 4096

typedef struct {
  pthread_mutex_t lock;
  node *root;
  void *free_list;
  void *slabs; /* singly linked through the first word of each slab */
  size_t node_size;
  size_t count, bytes;
  uint32_t seed;
  int backtraces;
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
  if (tr->backtraces)
    free(((node_bt *)n)->bt);
  *(void **)n = tr->free_list;
  tr->free_list = n;
}

/* ------------------------------------------------------------------ ops */

static int tr_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream stream,
                       void **out) {
  tracking *tr = self->ctx;
  frames *bt = NULL;
  if (tr->backtraces) {
    bt = malloc(sizeof *bt);
    if (bt) {
      bt->n = backtrace(bt->pc, DEVMM_TRACKING_MAX_FRAMES);
      bt->tid = (uint32_t)devmm__thread_id();
    }
  }
  devmm_resource *up = self->upstream;
  int rc = up->ops.allocate(up, bytes, align, stream, out);
  if (DEVMM__UNLIKELY(rc)) {
    free(bt);
    return rc;
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
  if (tr->backtraces)
    ((node_bt *)n)->bt = bt;
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
    free(((node_bt *)t)->bt);
  }
}

static void tr_destroy(devmm_resource *self) {
  tracking *tr = self->ctx;
  if (tr->backtraces)
    free_frames(tr->root); /* allocations never freed */
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

int devmm_tracking_adaptor_create(devmm_resource *upstream, int capture_backtraces,
                                  devmm_resource **out) {
  tracking *tr = calloc(1, sizeof *tr);
  if (!tr) {
    if (out)
      *out = NULL;
    return devmm_set_error(DEVMM_ENOMEM, "tracking adaptor: out of host memory");
  }
  pthread_mutex_init(&tr->lock, NULL);
  tr->backtraces = capture_backtraces != 0;
  tr->node_size = tr->backtraces ? sizeof(node_bt) : sizeof(node);
  tr->seed = 0x9e3779b9u;
  if (tr->backtraces) {
    void *warm[1];
    backtrace(warm, 1); /* loads libgcc_s now, not inside the first allocation */
  }
  int rc = devmm__adaptor_create(&tracking_ops, tr, upstream, "tracking", out);
  if (rc) {
    pthread_mutex_destroy(&tr->lock);
    free(tr);
  }
  return rc;
}

static void fill_info(const tracking *tr, const node *n, devmm_allocation_info *o) {
  memset(o, 0, sizeof *o);
  o->ptr = (void *)n->ptr;
  o->bytes = n->bytes;
  o->alignment = n->align_log2 ? (size_t)1 << n->align_log2 : 0;
  o->stream = n->stream;
  const frames *bt = tr->backtraces ? ((const node_bt *)n)->bt : NULL;
  if (bt) {
    o->thread_id = bt->tid;
    o->nframes = bt->n;
    memcpy(o->frames, bt->pc, sizeof(void *) * (size_t)bt->n);
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

static int report_one(const devmm_allocation_info *i, void *user) {
  FILE *f = user;
  fprintf(f, "  %p  %zu bytes  stream %p", i->ptr, i->bytes, i->stream);
  if (i->nframes) {
    fprintf(f, "  thread %llu\n", (unsigned long long)i->thread_id);
    char **sym = backtrace_symbols(i->frames, i->nframes);
    for (int k = 0; k < i->nframes; k++)
      fprintf(f, "    #%d %s\n", k, sym ? sym[k] : "?");
    free(sym);
  } else {
    fputc('\n', f);
  }
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
  walk(tr, tr->root, report_one, f);
  pthread_mutex_unlock(&tr->lock);
  fclose(f);
  *out = buf;
  return DEVMM_OK;
}

void devmm_string_free(char *s) { free(s); }
