/* The tracking adaptor's internals, shared by its two files:
 *   tracking.c        the striped, address-ordered index (treaps and node slabs), the adaptor's
 *                     ops, backtraces, the history ring, creation
 *   tracking_query.c  lookups, totals, walks, reports, its part of out-of-memory reports
 * How the index works is said at the head of tracking.c. */
#ifndef DEVMM_TRACKING_INTERNAL_H
#define DEVMM_TRACKING_INTERNAL_H

#include "../resource/resource_internal.h"

#include <pthread.h>

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

static inline void lock_all(tracking *tr) {
  for (unsigned i = 0; i < NSHARDS; i++)
    devmm__spin_lock(&tr->shards[i].lock);
}

static inline void unlock_all(tracking *tr) {
  for (unsigned i = NSHARDS; i-- > 0;)
    devmm__spin_unlock(&tr->shards[i].lock);
}

/* tracking.c: in the treap of one stripe (keys: start addresses), the last node starting at or
 * below k; the first starting above k; the lowest. (Inserting, erasing and the node slabs stay
 * static there, inlined into the allocation path.) */
node *devmm__tr_floor(node *t, uintptr_t k);
node *devmm__tr_successor(node *t, uintptr_t k);
node *devmm__tr_first(node *t);

/* tracking.c: the adaptor's ops table (what devmm__check_kind compares). */
extern const devmm_resource_ops devmm__tracking_ops;
/* tracking_query.c: its part of an out-of-memory report (devmm__oom_hook). */
void devmm__tracking_oom(devmm_resource *self, devmm_oom_report *o);

#endif
