/* The tracking adaptor's queries (tracking_internal.h): the allocation containing an address,
 * totals, walks in address order, the outstanding-allocations report, frame and context
 * descriptions, and its part of out-of-memory reports (resource/oom.c). */
#include "tracking_internal.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  int rc = devmm__check_kind(r, &devmm__tracking_ops, "tracking adaptor");
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
    node *n = devmm__tr_floor(s->root, (uintptr_t)addr);
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
  int rc = devmm__check_kind(r, &devmm__tracking_ops, "tracking adaptor");
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
    cur[i] = devmm__tr_first(tr->shards[i].root);
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
    cur[m] = devmm__tr_successor(tr->shards[m].root, cur[m]->ptr);
  }
}

int devmm_tracking_foreach(devmm_resource *r, int (*fn)(const devmm_allocation_info *, void *),
                           void *user) {
  int rc = devmm__check_kind(r, &devmm__tracking_ops, "tracking adaptor");
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
  int rc = devmm__check_kind(r, &devmm__tracking_ops, "tracking adaptor");
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
  int rc = devmm__check_kind(r, &devmm__tracking_ops, "tracking adaptor");
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
  int rc = devmm__check_kind(r, &devmm__tracking_ops, "tracking adaptor");
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

/* The n largest live allocations of r, largest first (returns how many), with its totals. */
static size_t largest(devmm_resource *r, devmm_allocation_info *out, size_t n, size_t *count,
                      size_t *bytes) {
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

/* Where an allocation came from: the innermost line of its context, else its first C frame. */
static void where_of(const tracking *tr, const devmm_allocation_info *i, char *buf, size_t cap) {
  buf[0] = '\0';
  if (i->tag) {
    char text[1024];
    describe(tr, i->tag, text, sizeof text);
    size_t n = strcspn(text, "\n");
    snprintf(buf, cap, "%.*s", (int)n, text);
  }
  if (!buf[0] && i->nframes)
    devmm_frame_describe(i->frames[0], buf, cap);
}

/* Its part of an out-of-memory report (resource/oom.c): the largest live allocations and where
 * each came from; the outermost tracking layer's list stays. */
void devmm__tracking_oom(devmm_resource *self, devmm_oom_report *o) {
  if (o->tracking[0])
    return;
  snprintf(o->tracking, sizeof o->tracking, "%s", self->name);
  devmm_allocation_info big[DEVMM_OOM_LARGEST];
  o->nlargest = largest(self, big, DEVMM_OOM_LARGEST, &o->live_count, &o->live_bytes);
  for (size_t i = 0; i < o->nlargest; i++) {
    o->largest[i].ptr = big[i].ptr;
    o->largest[i].bytes = big[i].bytes;
    o->largest[i].thread_id = big[i].thread_id;
    where_of(self->ctx, &big[i], o->largest[i].where, sizeof o->largest[i].where);
  }
}
