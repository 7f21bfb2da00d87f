/* Suite: stress. Both cores, >= 1e6 random allocate/free through
 * statistics(tracking(limiting(test.malloc))); at the end the counts balance. Then the sharded
 * adaptors under concurrency (ADR 29): tracking's lookups, walks and frees from other threads,
 * and limiting at its limit from several threads. */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testres.h"

#define THREADS 2
/* successful allocate+free operations per thread, however the threads are scheduled (valgrind
 * runs them one at a time and the limit then refuses more); attempts are capped at 4x */
#define OPS_PER_THREAD 520000
#define SLOTS 64
#define LIMIT (128 * 1024)

typedef struct {
  devmm_resource *r;
  unsigned seed;
  long allocs, frees, failures;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  void *ptr[SLOTS] = {0};
  size_t size[SLOTS] = {0};
  for (long i = 0; w->allocs + w->frees < OPS_PER_THREAD && i < 4L * OPS_PER_THREAD; i++) {
    int k = rand_r(&w->seed) % SLOTS;
    if (ptr[k]) {
      if (devmm_deallocate(w->r, ptr[k], size[k], 0, NULL) != DEVMM_OK)
        abort();
      ptr[k] = NULL;
      w->frees++;
    } else {
      size[k] = 1 + (size_t)(rand_r(&w->seed) % 8192);
      int rc = devmm_allocate(w->r, size[k], 0, NULL, &ptr[k]);
      if (rc == DEVMM_ENOMEM) { /* the limit is deliberately tight enough to be hit */
        w->failures++;
        ptr[k] = NULL;
        continue;
      }
      if (rc)
        abort();
      memset(ptr[k], k, size[k] < 64 ? size[k] : 64);
      w->allocs++;
    }
  }
  for (int k = 0; k < SLOTS; k++)
    if (ptr[k]) {
      devmm_deallocate(w->r, ptr[k], size[k], 0, NULL);
      w->frees++;
    }
  return NULL;
}

START_TEST(stress_full_stack_balances) {
  testres *ts;
  devmm_resource *base = testres_create(&ts), *lim, *tr, *st;
  /* each thread keeps about half of its 64 slots filled with 4 KiB on average: about 256 KiB
   wanted by two threads against a LIMIT of 128 KiB, so the limit is hit often, and the
   refusals must leave every count balanced too */
  ck_assert_int_eq(devmm_limiting_adaptor_create(base, LIMIT, &lim), DEVMM_OK);
  size_t limit;
  ck_assert_int_eq(devmm_limiting_get(lim, NULL, &limit), DEVMM_OK);
  ck_assert_uint_eq(limit, LIMIT);
  ck_assert_int_eq(devmm_tracking_adaptor_create(lim, 0, &tr), DEVMM_OK);
  ck_assert_int_eq(devmm_statistics_adaptor_create(tr, &st), DEVMM_OK);
  worker w[THREADS];
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (worker){st, 1000u + (unsigned)i, 0, 0, 0};
    pthread_create(&t[i], NULL, work, &w[i]);
  }
  long allocs = 0, frees = 0, failures = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    allocs += w[i].allocs;
    frees += w[i].frees;
    failures += w[i].failures;
  }
  ck_assert_int_ge(allocs + frees, 1000000); /* successful allocate/free operations */
  ck_assert_int_eq(allocs, frees);
  devmm_statistics s;
  devmm_statistics_get(st, &s);
  ck_assert_int_eq(s.current_bytes, 0);
  ck_assert_int_eq(s.current_count, 0);
  ck_assert_int_eq(s.total_count, allocs);
  /* statistics sits outside limiting and counts a free after limiting has released it, so
     another thread's allocation can briefly overlap: at most one in-flight free per thread */
  ck_assert_int_le(s.peak_bytes, LIMIT + THREADS * 8192);
  /* the limit binds: requests were refused, and only when usage came within one request of it
     (statistics may trail limiting by one allocation in flight per thread) */
  ck_assert_int_gt(failures, 0);
  ck_assert_int_ge(s.peak_bytes, LIMIT - 2 * THREADS * 8192);
  size_t count, bytes, used;
  devmm_tracking_outstanding(tr, &count, &bytes);
  ck_assert_uint_eq(count, 0);
  ck_assert_uint_eq(bytes, 0);
  devmm_limiting_get(lim, &used, NULL);
  ck_assert_uint_eq(used, 0);
  ck_assert_int_eq(ts->allocs, ts->frees);
  ck_assert_int_eq(ts->live_bytes, 0);
  ck_assert_int_eq(ts->allocs, allocs);
  printf("stress: %ld allocations, %ld frees, %ld refused by the limit, peak %lld bytes\n", allocs,
         frees, failures, (long long)s.peak_bytes);
  devmm_resource_release(st);
  devmm_resource_release(tr);
  devmm_resource_release(lim);
  devmm_resource_release(base);
}
END_TEST

/* ================================================================ sharded tracking */

/* Allocations pass between threads through a small locked queue: each thread frees mostly what
 * others allocated, so allocate and free of one allocation run on different threads. */
#define TR_THREADS 4
#define TR_ROUNDS 20000
#define TR_QUEUE 256

typedef struct {
  pthread_mutex_t lock;
  void *ptr[TR_QUEUE];
  size_t size[TR_QUEUE];
  int n;
} handoff;

typedef struct {
  devmm_resource *tr;
  handoff *q;
  unsigned seed;
  long lookups, misses, frees, foreign_frees;
  atomic_int *stop;
  long walks, disorder;
} tr_worker;

static int queue_swap(handoff *q, void **p, size_t *size, unsigned *seed) {
  /* puts (*p, *size) in a random slot and takes out what was there (or nothing) */
  pthread_mutex_lock(&q->lock);
  int k = (int)(rand_r(seed) % TR_QUEUE), had = k < q->n;
  void *old = had ? q->ptr[k] : NULL;
  size_t olds = had ? q->size[k] : 0;
  if (had) {
    q->ptr[k] = *p, q->size[k] = *size;
  } else {
    q->ptr[q->n] = *p, q->size[q->n] = *size;
    q->n++;
  }
  pthread_mutex_unlock(&q->lock);
  *p = old;
  *size = olds;
  return had;
}

static void *tr_work(void *arg) {
  tr_worker *w = arg;
  void *mine[8] = {0};
  size_t msize[8] = {0};
  for (int round = 0; round < TR_ROUNDS; round++) {
    int k = round % 8;
    if (mine[k]) { /* hand it on; free what comes back (usually another thread's) */
      void *p = mine[k];
      size_t size = msize[k];
      mine[k] = NULL;
      if (queue_swap(w->q, &p, &size, &w->seed)) {
        if (devmm_deallocate(w->tr, p, size, 0, NULL) != DEVMM_OK)
          return (void *)devmm_last_error(); /* a free another thread's shard did not know */
        w->frees++;
      }
      continue;
    }
    /* sizes up to 64 KiB span thousands of 16-byte granules: interior pointers hash to other
     * shards than the allocation's start */
    msize[k] = 1 + (size_t)(rand_r(&w->seed) % 65536);
    if (devmm_allocate(w->tr, msize[k], 0, NULL, &mine[k]) != DEVMM_OK)
      abort();
    for (int j = 0; j < 8; j++) {
      if (!mine[j])
        continue;
      size_t off = (size_t)rand_r(&w->seed) % msize[j];
      devmm_allocation_info info;
      w->lookups++;
      if (devmm_tracking_lookup(w->tr, (char *)mine[j] + off, &info) != DEVMM_OK ||
          info.ptr != mine[j] || info.bytes != msize[j])
        w->misses++;
    }
  }
  for (int k = 0; k < 8; k++)
    if (mine[k] && devmm_deallocate(w->tr, mine[k], msize[k], 0, NULL) == DEVMM_OK)
      w->frees++;
  return NULL;
}

static int order_cb(const devmm_allocation_info *i, void *user) {
  uintptr_t *last = user;
  if ((uintptr_t)i->ptr <= last[0])
    last[1]++;
  last[0] = (uintptr_t)i->ptr;
  return 0;
}

static void *tr_walker(void *arg) {
  tr_worker *w = arg;
  while (!atomic_load(w->stop)) {
    uintptr_t last[2] = {0, 0};
    devmm_tracking_foreach(w->tr, order_cb, last);
    w->disorder += (long)last[1];
    size_t count, bytes;
    devmm_tracking_outstanding(w->tr, &count, &bytes);
    if (count > TR_THREADS * 8 + TR_QUEUE) /* never more than what the threads can hold */
      w->disorder++;
    w->walks++;
    /* a walk holds every stripe: leave the workers room between two (valgrind runs one thread
     * at a time, and a walker that never pauses starves them there) */
    nanosleep(&(struct timespec){0, 50000}, NULL);
  }
  return NULL;
}

START_TEST(stress_tracking_shards) {
  testres *ts;
  devmm_resource *base = testres_create(&ts), *tr;
  ck_assert_int_eq(devmm_tracking_adaptor_create(base, 0, &tr), DEVMM_OK);
  handoff q = {.n = 0};
  pthread_mutex_init(&q.lock, NULL);
  atomic_int stop = 0;
  tr_worker w[TR_THREADS + 1];
  pthread_t t[TR_THREADS + 1];
  for (int i = 0; i <= TR_THREADS; i++) {
    w[i] = (tr_worker){.tr = tr, .q = &q, .seed = 77u + (unsigned)i, .stop = &stop};
    pthread_create(&t[i], NULL, i < TR_THREADS ? tr_work : tr_walker, &w[i]);
  }
  long lookups = 0, misses = 0, frees = 0;
  for (int i = 0; i < TR_THREADS; i++) {
    void *err;
    pthread_join(t[i], &err);
    ck_assert_msg(err == NULL, "a free from another thread was refused: %s", (const char *)err);
    lookups += w[i].lookups, misses += w[i].misses, frees += w[i].frees;
  }
  atomic_store(&stop, 1);
  pthread_join(t[TR_THREADS], NULL);
  ck_assert_int_gt(lookups, 100000);
  ck_assert_int_eq(misses, 0); /* every interior pointer of a live allocation is found */
  ck_assert_int_gt(w[TR_THREADS].walks, 0);
  ck_assert_int_eq(w[TR_THREADS].disorder, 0); /* walks in strictly ascending address order */
  size_t count, bytes;
  ck_assert_int_eq(devmm_tracking_outstanding(tr, &count, &bytes), DEVMM_OK);
  ck_assert_uint_eq(count, (size_t)q.n); /* what is left is what waits in the queue */
  for (int k = 0; k < q.n; k++) {
    ck_assert_int_eq(devmm_deallocate(tr, q.ptr[k], q.size[k], 0, NULL), DEVMM_OK);
    frees++;
  }
  ck_assert_int_eq(devmm_tracking_outstanding(tr, &count, &bytes), DEVMM_OK);
  ck_assert_uint_eq(count, 0);
  ck_assert_uint_eq(bytes, 0);
  ck_assert_int_eq(ts->allocs, frees);
  ck_assert_int_eq(ts->live_bytes, 0);
  pthread_mutex_destroy(&q.lock);
  devmm_resource_release(tr);
  devmm_resource_release(base);
}
END_TEST

/* ================================================================ sharded limiting */

/* A malloc resource that knows the most bytes it ever held at once: what limiting let through. */
typedef struct {
  atomic_long live, peak;
} peak_state;

static int pk_alloc(devmm_resource *self, size_t b, size_t a, devmm_stream s, void **o) {
  (void)a, (void)s;
  peak_state *st = devmm_resource_context(self);
  *o = malloc(b);
  if (!*o)
    return DEVMM_ENOMEM;
  long now = atomic_fetch_add(&st->live, (long)b) + (long)b;
  long p = atomic_load(&st->peak);
  while (now > p && !atomic_compare_exchange_weak(&st->peak, &p, now))
    ;
  return DEVMM_OK;
}

static int pk_free(devmm_resource *self, void *p, size_t b, size_t a, devmm_stream s) {
  (void)a, (void)s;
  peak_state *st = devmm_resource_context(self);
  atomic_fetch_sub(&st->live, (long)b); /* before the memory goes: never under-counts */
  free(p);
  return DEVMM_OK;
}

static const devmm_resource_ops peak_ops = {
    .struct_size = sizeof peak_ops, .allocate = pk_alloc, .deallocate = pk_free};

#define LIM_THREADS 4
#define LIM_LIMIT (512 * 1024) /* a credit chunk of 1 KiB: half the requests fit one */
/* half full: ~512 KiB, so even one thread alone (valgrind) hits the limit */
#define LIM_SLOTS 1024
#define LIM_ROUNDS 200000

typedef struct {
  devmm_resource *lim;
  unsigned seed;
  long allocs, refused;
} lim_worker;

static void *lim_work(void *arg) {
  lim_worker *w = arg;
  void *p[LIM_SLOTS] = {0};
  size_t size[LIM_SLOTS] = {0};
  for (int i = 0; i < LIM_ROUNDS; i++) {
    int k = (int)(rand_r(&w->seed) % LIM_SLOTS);
    if (p[k]) {
      devmm_deallocate(w->lim, p[k], size[k], 0, NULL);
      p[k] = NULL;
      continue;
    }
    size[k] = 1 + (size_t)(rand_r(&w->seed) % 2048);
    if (devmm_allocate(w->lim, size[k], 0, NULL, &p[k]) == DEVMM_OK)
      w->allocs++;
    else
      w->refused++, p[k] = NULL;
  }
  /* free everything, in two passes; the shard keeps its credit (up to two chunks) */
  for (int k = 0; k < LIM_SLOTS; k += 2)
    if (p[k])
      devmm_deallocate(w->lim, p[k], size[k], 0, NULL), p[k] = NULL;
  for (int k = 1; k < LIM_SLOTS; k += 2)
    if (p[k])
      devmm_deallocate(w->lim, p[k], size[k], 0, NULL);
  return NULL;
}

/* Several threads keep a limiting adaptor at its limit: what the upstream ever holds at once
 * never exceeds the limit, the limit binds (it is reached to within a request per thread), and
 * once they stop, every byte is accounted for again: one thread gets exactly what is left, and
 * not one byte more (no credit stays stranded in the other threads' shards). */
START_TEST(stress_limiting_at_the_limit) {
  peak_state st = {0};
  devmm_device cpu = {DEVMM_DEVICE_CPU, 0};
  devmm_resource *up, *lim;
  ck_assert_int_eq(
      devmm_resource_create(&peak_ops, &st, cpu, "peak", DEVMM_RESOURCE_THREAD_SAFE, &up),
      DEVMM_OK);
  ck_assert_int_eq(devmm_limiting_adaptor_create(up, LIM_LIMIT, &lim), DEVMM_OK);
  lim_worker w[LIM_THREADS];
  pthread_t t[LIM_THREADS];
  for (int i = 0; i < LIM_THREADS; i++) {
    w[i] = (lim_worker){lim, 500u + (unsigned)i, 0, 0};
    pthread_create(&t[i], NULL, lim_work, &w[i]);
  }
  long refused = 0;
  for (int i = 0; i < LIM_THREADS; i++) {
    pthread_join(t[i], NULL);
    refused += w[i].refused;
  }
  long peak = atomic_load(&st.peak);
  ck_assert_int_le(peak, LIM_LIMIT); /* never over-committed */
  ck_assert_int_gt(refused, 0);
  ck_assert_int_ge(peak, LIM_LIMIT - LIM_THREADS * 2048);
  size_t used;
  ck_assert_int_eq(devmm_limiting_get(lim, &used, NULL), DEVMM_OK);
  ck_assert_uint_eq(used, 0);
  ck_assert_int_eq(atomic_load(&st.live), 0);
  /* all of it, from one thread, while the workers' shards may still hold credit */
  void *all, *one;
  ck_assert_int_eq(devmm_allocate(lim, LIM_LIMIT - 100, 0, NULL, &all), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(lim, 100, 0, NULL, &one), DEVMM_OK);
  void *more = (void *)1;
  ck_assert_int_eq(devmm_allocate(lim, 1, 0, NULL, &more), DEVMM_ENOMEM);
  ck_assert_error_contains("(524288 bytes in use)");
  ck_assert_ptr_null(more);
  ck_assert_int_eq(devmm_limiting_get(lim, &used, NULL), DEVMM_OK);
  ck_assert_uint_eq(used, LIM_LIMIT);
  devmm_deallocate(lim, one, 100, 0, NULL);
  devmm_deallocate(lim, all, LIM_LIMIT - 100, 0, NULL);
  ck_assert_int_eq(devmm_limiting_get(lim, &used, NULL), DEVMM_OK);
  ck_assert_uint_eq(used, 0);
  printf("stress: limiting at %d bytes from %d threads: %ld refused, peak %ld bytes\n", LIM_LIMIT,
         LIM_THREADS, refused, (long)atomic_load(&st.peak));
  devmm_resource_release(lim);
  devmm_resource_release(up);
}
END_TEST

/* A request larger than the limit is refused without making room for others: on the old code
 * its add wrapped the shared count around for a moment (100 + SIZE_MAX reads 99), and another
 * thread's request of 901 bytes then fitted a limit of 1000 with 100 in use. */
typedef struct {
  devmm_resource *lim;
  atomic_int *stop;
  atomic_long tries;
} huge_worker;

static void *huge_work(void *arg) {
  huge_worker *w = arg;
  while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
    void *p;
    if (devmm_allocate(w->lim, SIZE_MAX, 0, NULL, &p) == DEVMM_OK)
      abort();
    atomic_fetch_add_explicit(&w->tries, 1, memory_order_relaxed);
  }
  return NULL;
}

START_TEST(stress_limiting_huge_request_makes_no_room) {
  testres *ts;
  devmm_resource *up = testres_create(&ts), *lim;
  ck_assert_int_eq(devmm_limiting_adaptor_create(up, 1000, &lim), DEVMM_OK);
  void *held, *p;
  ck_assert_int_eq(devmm_allocate(lim, 100, 0, NULL, &held), DEVMM_OK);
  atomic_int stop = 0;
  huge_worker w = {lim, &stop, 0};
  pthread_t t;
  pthread_create(&t, NULL, huge_work, &w);
  while (atomic_load(&w.tries) < 100) /* it runs (under valgrind threads take turns) */
    sched_yield();
  long over = 0;
  for (int i = 0; i < 300000 || atomic_load(&w.tries) < 1000; i++)
    if (devmm_allocate(lim, 901, 0, NULL, &p) == DEVMM_OK) {
      over++;
      devmm_deallocate(lim, p, 901, 0, NULL);
    }
  atomic_store(&stop, 1);
  pthread_join(t, NULL);
  ck_assert_int_gt(w.tries, 0);
  ck_assert_msg(over == 0,
                "%ld allocations of 901 bytes got through a limit of 1000 with 100 in use", over);
  devmm_deallocate(lim, held, 100, 0, NULL);
  ck_assert_int_eq(ts->live_bytes, 0);
  devmm_resource_release(lim);
  devmm_resource_release(up);
}
END_TEST

Suite *stress_suite(void) {
  Suite *s = suite_create("stress");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, stress_full_stack_balances);
  tcase_add_test(tc, stress_tracking_shards);
  tcase_add_test(tc, stress_limiting_at_the_limit);
  tcase_add_test(tc, stress_limiting_huge_request_makes_no_room);
  tcase_set_timeout(tc, 300);
  suite_add_tcase(s, tc);
  return s;
}
