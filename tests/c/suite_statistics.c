/* Suite statistics: the statistics adaptor, each test in both modes (exact and sharded, ADR 29). */
#include <check.h>
#include <pthread.h>

#include "testres.h"

static devmm_statistics stats_of(devmm_resource *st) {
  devmm_statistics s;
  ck_assert_int_eq(devmm_statistics_get(st, &s), DEVMM_OK);
  return s;
}

/* Every statistics test runs in both modes: _i = 0 exact, _i = 1 sharded. */
#define MODE (_i ? DEVMM_STATISTICS_SHARDED : 0u)

START_TEST(statistics_counts) {
  devmm_resource *up = testres_create(NULL), *st;
  ck_assert_int_eq(devmm_statistics_adaptor_create_ex(up, MODE, &st), DEVMM_OK);
  void *a, *b;
  ck_assert_int_eq(devmm_allocate(st, 100, 0, NULL, &a), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(st, 50, 0, NULL, &b), DEVMM_OK);
  devmm_statistics s = stats_of(st);
  ck_assert_int_eq(s.current_bytes, 150);
  ck_assert_int_eq(s.peak_bytes, 150);
  ck_assert_int_eq(s.current_count, 2);
  devmm_deallocate(st, a, 100, 0, NULL);
  s = stats_of(st);
  ck_assert_int_eq(s.current_bytes, 50);
  ck_assert_int_eq(s.peak_bytes, 150);
  ck_assert_int_eq(s.total_bytes, 150);
  ck_assert_int_eq(s.total_count, 2);
  ck_assert_int_eq(s.peak_count, 2);
  ck_assert_int_eq(devmm_statistics_reset_peak(st), DEVMM_OK);
  s = stats_of(st);
  ck_assert_int_eq(s.peak_bytes, 50);
  ck_assert_int_eq(s.peak_count, 1);
  devmm_deallocate(st, b, 50, 0, NULL);
  ck_assert_int_eq(stats_of(st).current_bytes, 0);
  devmm_resource_release(st);
  devmm_resource_release(up);
}
END_TEST

/* The peak is raised by the allocation that reaches it, not only by a read: nothing reads the
 * figures until everything is freed again. */
START_TEST(statistics_peak_between_reads) {
  devmm_resource *up = testres_create(NULL), *st;
  ck_assert_int_eq(devmm_statistics_adaptor_create_ex(up, MODE, &st), DEVMM_OK);
  void *p[3];
  for (int i = 0; i < 3; i++)
    ck_assert_int_eq(devmm_allocate(st, 100 * (size_t)(i + 1), 0, NULL, &p[i]), DEVMM_OK);
  for (int i = 0; i < 3; i++)
    ck_assert_int_eq(devmm_deallocate(st, p[i], 100 * (size_t)(i + 1), 0, NULL), DEVMM_OK);
  devmm_statistics s = stats_of(st);
  ck_assert_int_eq(s.current_bytes, 0);
  ck_assert_int_eq(s.current_count, 0);
  ck_assert_int_eq(s.peak_bytes, 600);
  ck_assert_int_eq(s.peak_count, 3);
  /* after a reset, a new (lower) peak between two reads */
  ck_assert_int_eq(devmm_statistics_reset_peak(st), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(st, 40, 0, NULL, &p[0]), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(st, 10, 0, NULL, &p[1]), DEVMM_OK);
  devmm_deallocate(st, p[0], 40, 0, NULL);
  devmm_deallocate(st, p[1], 10, 0, NULL);
  s = stats_of(st);
  ck_assert_int_eq(s.peak_bytes, 50);
  ck_assert_int_eq(s.peak_count, 2);
  /* a new high in bytes alone (the count stays at its old high): still a new peak */
  ck_assert_int_eq(devmm_allocate(st, 500, 0, NULL, &p[0]), DEVMM_OK);
  devmm_deallocate(st, p[0], 500, 0, NULL);
  s = stats_of(st);
  ck_assert_int_eq(s.peak_bytes, 500);
  ck_assert_int_eq(s.peak_count, 2);
  /* and in count alone */
  for (int i = 0; i < 3; i++)
    ck_assert_int_eq(devmm_allocate(st, 1, 0, NULL, &p[i]), DEVMM_OK);
  for (int i = 0; i < 3; i++)
    devmm_deallocate(st, p[i], 1, 0, NULL);
  s = stats_of(st);
  ck_assert_int_eq(s.peak_bytes, 500);
  ck_assert_int_eq(s.peak_count, 3);
  /* inside a scope too */
  ck_assert_int_eq(devmm_statistics_push(st), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(st, 70, 0, NULL, &p[0]), DEVMM_OK);
  devmm_deallocate(st, p[0], 70, 0, NULL);
  devmm_statistics inner;
  ck_assert_int_eq(devmm_statistics_pop(st, &inner), DEVMM_OK);
  ck_assert_int_eq(inner.peak_bytes, 70);
  ck_assert_int_eq(inner.peak_count, 1);
  s = stats_of(st);
  ck_assert_int_eq(s.peak_bytes, 500); /* the outer peak was higher than the inner one */
  ck_assert_int_eq(s.total_count, 10);
  ck_assert_int_eq(s.total_bytes, 600 + 50 + 500 + 3 + 70);
  devmm_resource_release(st);
  devmm_resource_release(up);
}
END_TEST

START_TEST(statistics_scopes) {
  devmm_resource *up = testres_create(NULL), *st;
  ck_assert_int_eq(devmm_statistics_adaptor_create_ex(up, MODE, &st), DEVMM_OK);
  void *a, *b, *c;
  devmm_allocate(st, 1000, 0, NULL, &a);
  ck_assert_int_eq(devmm_statistics_push(st), DEVMM_OK);
  devmm_statistics s = stats_of(st);
  ck_assert_int_eq(s.current_bytes, 0);
  ck_assert_int_eq(s.peak_bytes, 0);
  devmm_allocate(st, 300, 0, NULL, &b);
  devmm_allocate(st, 200, 0, NULL, &c);
  devmm_deallocate(st, b, 300, 0, NULL);
  devmm_deallocate(st, a, 1000, 0, NULL); /* an outer allocation freed inside the scope */
  devmm_statistics inner;
  ck_assert_int_eq(devmm_statistics_pop(st, &inner), DEVMM_OK);
  ck_assert_int_eq(inner.current_bytes, -800);
  ck_assert_int_eq(inner.peak_bytes, 500);
  ck_assert_int_eq(inner.total_bytes, 500);
  ck_assert_int_eq(inner.total_count, 2);
  s = stats_of(st);
  ck_assert_int_eq(s.current_bytes, 200);
  ck_assert_int_eq(s.peak_bytes, 1500);
  ck_assert_int_eq(s.total_bytes, 1500);
  ck_assert_int_eq(devmm_statistics_pop(st, NULL), DEVMM_ESTATE);
  ck_assert_error_contains("pop without a matching push");
  ck_assert_int_eq(stats_of(st).current_bytes, 200); /* the refused pop left it usable */
  ck_assert_int_eq(devmm_statistics_push(st), DEVMM_OK);
  ck_assert_int_eq(devmm_statistics_pop(st, NULL), DEVMM_OK);
  devmm_deallocate(st, c, 200, 0, NULL);
  devmm_resource_release(st);
  devmm_resource_release(up);
}
END_TEST

START_TEST(statistics_failure_not_counted_and_bad_input) {
  testres *ts;
  devmm_resource *up = testres_create(&ts), *st;
  ck_assert_int_eq(devmm_statistics_adaptor_create_ex(up, MODE, &st), DEVMM_OK);
  ts->fail_at = 1;
  void *p;
  ck_assert_int_eq(devmm_allocate(st, 10, 0, NULL, &p), DEVMM_ENOMEM);
  ck_assert_int_eq(stats_of(st).total_count, 0);
  devmm_statistics s;
  ck_assert_int_eq(devmm_statistics_get(up, &s), DEVMM_EINVAL);
  ck_assert_error_contains("resource 'test.malloc' is not a statistics adaptor");
  ck_assert_int_eq(devmm_statistics_get(NULL, &s), DEVMM_EINVAL);
  ck_assert_int_eq(devmm_statistics_get(st, NULL), DEVMM_EINVAL);
  devmm_resource_release(st);
  ck_assert_int_eq(devmm_statistics_adaptor_create(NULL, &st), DEVMM_EINVAL);
  ck_assert_error_contains("statistics adaptor: upstream is NULL");
  ck_assert_ptr_null(st);
  ck_assert_int_eq(devmm_statistics_adaptor_create_ex(up, 0x80, &st), DEVMM_EINVAL);
  ck_assert_error_contains("unknown flags 0x80");
  devmm_resource_release(up);
}
END_TEST

typedef struct {
  devmm_resource *r;
  int hold;
} churn_arg;

static void *churn(void *arg) {
  churn_arg *a = arg;
  void *keep[16];
  for (int i = 0; i < a->hold; i++)
    ck_assert_int_eq(devmm_allocate(a->r, 1000, 0, NULL, &keep[i]), DEVMM_OK);
  for (int i = 0; i < 100000; i++) {
    void *p;
    ck_assert_int_eq(devmm_allocate(a->r, 10, 0, NULL, &p), DEVMM_OK);
    devmm_deallocate(a->r, p, 10, 0, NULL);
  }
  for (int i = 0; i < a->hold; i++)
    devmm_deallocate(a->r, keep[i], 1000, 0, NULL);
  return NULL;
}

/* Sharded mode under two threads: current and totals exact, peak a lower bound that saw at
 * least each thread's own high. */
START_TEST(statistics_sharded_threads) {
  devmm_resource *up = testres_create(NULL), *st;
  ck_assert_int_eq(devmm_statistics_adaptor_create_ex(up, DEVMM_STATISTICS_SHARDED, &st), 0);
  pthread_t t[2];
  churn_arg args[2] = {{st, 3}, {st, 5}};
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, churn, &args[i]);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  devmm_statistics s = stats_of(st);
  ck_assert_int_eq(s.current_bytes, 0);
  ck_assert_int_eq(s.current_count, 0);
  ck_assert_int_eq(s.total_count, 200008);
  ck_assert_int_eq(s.total_bytes, 2000000 + 8000);
  ck_assert_int_ge(s.peak_bytes, 5010);
  ck_assert_int_le(s.peak_bytes, 8020);
  devmm_resource_release(st);
  devmm_resource_release(up);
}
END_TEST

Suite *statistics_suite(void) {
  Suite *s = suite_create("statistics");
  TCase *tc = tcase_create("core");
  tcase_add_loop_test(tc, statistics_counts, 0, 2);
  tcase_add_loop_test(tc, statistics_peak_between_reads, 0, 2);
  tcase_add_loop_test(tc, statistics_scopes, 0, 2);
  tcase_add_loop_test(tc, statistics_failure_not_counted_and_bad_input, 0, 2);
  tcase_add_test(tc, statistics_sharded_threads);
  suite_add_tcase(s, tc);
  return s;
}
