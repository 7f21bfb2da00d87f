/* Suite: stress. Both cores, >= 1e6 random allocate/free through
 * statistics(tracking(limiting(test.malloc))); at the end the counts balance. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

Suite *stress_suite(void) {
  Suite *s = suite_create("stress");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, stress_full_stack_balances);
  tcase_set_timeout(tc, 300);
  suite_add_tcase(s, tc);
  return s;
}
