/* The tracking adaptor's index (tracking_internal.h): per stripe, a treap of live allocations
 * ordered by start address, and its nodes from 4 KiB slabs with a free list. */
#include "tracking_internal.h"

#include <stdlib.h>
#include <string.h>

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
void devmm__tr_insert(node **t, node *n) {
  while (*t && (*t)->prio > n->prio)
    t = n->ptr < (*t)->ptr ? &(*t)->l : &(*t)->r;
  split(*t, n->ptr, &n->l, &n->r);
  *t = n;
}

node *devmm__tr_erase(node **t, uintptr_t k) {
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

node *devmm__tr_node_get(shard *s, size_t node_size) {
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

void devmm__tr_node_put(const tracking *tr, shard *s, node *n) {
  if (tr->ext)
    free(((node_ext *)n)->bt);
  *(void **)n = s->free_list;
  s->free_list = n;
}
