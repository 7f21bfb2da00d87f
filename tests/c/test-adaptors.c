/* Suites: statistics, limiting, tracking, logging, aligned, failure, thread_safe. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testres.h"

static devmm_statistics stats_of(devmm_resource *st) {
  devmm_statistics s;
  ck_assert_int_eq(devmm_statistics_get(st, &s), DEVMM_OK);
  return s;
}

/* ================================================================ statistics */
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
  /* inside a scope too */
  ck_assert_int_eq(devmm_statistics_push(st), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(st, 70, 0, NULL, &p[0]), DEVMM_OK);
  devmm_deallocate(st, p[0], 70, 0, NULL);
  devmm_statistics inner;
  ck_assert_int_eq(devmm_statistics_pop(st, &inner), DEVMM_OK);
  ck_assert_int_eq(inner.peak_bytes, 70);
  ck_assert_int_eq(inner.peak_count, 1);
  s = stats_of(st);
  ck_assert_int_eq(s.peak_bytes, 70); /* the inner peak merges into the outer one */
  ck_assert_int_eq(s.total_count, 6);
  ck_assert_int_eq(s.total_bytes, 600 + 50 + 70);
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

/* ================================================================ limiting */

START_TEST(limiting_refuses_over_limit) {
  devmm_resource *up = testres_create(NULL), *lim;
  ck_assert_int_eq(devmm_limiting_adaptor_create(up, 1000, &lim), DEVMM_OK);
  void *a, *b;
  ck_assert_int_eq(devmm_allocate(lim, 600, 0, NULL, &a), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(lim, 500, 0, NULL, &b), DEVMM_ENOMEM);
  ck_assert_error_contains("allocating 500 bytes");
  ck_assert_error_contains("limit of 1000 bytes (600 bytes in use)");
  ck_assert_ptr_null(b);
  ck_assert_int_eq(devmm_allocate(lim, SIZE_MAX, 0, NULL, &b), DEVMM_ENOMEM);
  size_t used, limit;
  ck_assert_int_eq(devmm_limiting_get(lim, &used, &limit), DEVMM_OK);
  ck_assert_uint_eq(used, 600);
  ck_assert_uint_eq(limit, 1000);
  ck_assert_int_eq(devmm_allocate(lim, 400, 0, NULL, &b), DEVMM_OK);
  size_t f, t;
  ck_assert_int_eq(devmm_mem_info(lim, &f, &t), DEVMM_OK);
  ck_assert_uint_eq(f, 0);
  ck_assert_uint_eq(t, 1000);
  devmm_deallocate(lim, a, 600, 0, NULL);
  devmm_deallocate(lim, b, 400, 0, NULL);
  devmm_limiting_get(lim, &used, NULL);
  ck_assert_uint_eq(used, 0);
  ck_assert_int_eq(devmm_limiting_get(up, &used, NULL), DEVMM_EINVAL);
  ck_assert_error_contains("not a limiting adaptor");
  devmm_resource_release(lim);
  devmm_resource_release(up);
}
END_TEST

/* Exactly the limit fits, from empty and on top of what is in use; one byte more does not. */
START_TEST(limiting_exactly_the_limit) {
  testres *ts;
  devmm_resource *up = testres_create(&ts), *lim;
  ck_assert_int_eq(devmm_limiting_adaptor_create(up, 1000, &lim), DEVMM_OK);
  void *a, *b;
  ck_assert_int_eq(devmm_allocate(lim, 1001, 0, NULL, &a), DEVMM_ENOMEM);
  ck_assert_error_contains("allocating 1001 bytes");
  ck_assert_error_contains("limit of 1000 bytes (0 bytes in use)");
  ck_assert_int_eq(devmm_allocate(lim, 1000, 0, NULL, &a), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(lim, 1, 0, NULL, &b), DEVMM_ENOMEM);
  ck_assert_error_contains("(1000 bytes in use)");
  ck_assert_int_eq(devmm_deallocate(lim, a, 1000, 0, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(lim, 999, 0, NULL, &a), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(lim, 2, 0, NULL, &b), DEVMM_ENOMEM);
  ck_assert_int_eq(devmm_allocate(lim, 1, 0, NULL, &b), DEVMM_OK);
  size_t used;
  ck_assert_int_eq(devmm_limiting_get(lim, &used, NULL), DEVMM_OK);
  ck_assert_uint_eq(used, 1000);
  devmm_deallocate(lim, a, 999, 0, NULL);
  devmm_deallocate(lim, b, 1, 0, NULL);
  ck_assert_int_eq(devmm_limiting_get(lim, &used, NULL), DEVMM_OK);
  ck_assert_uint_eq(used, 0);
  ck_assert_int_eq(ts->live_bytes, 0);
  devmm_resource_release(lim);
  devmm_resource_release(up);
}
END_TEST

START_TEST(limiting_upstream_failure_restores_count) {
  testres *ts;
  devmm_resource *up = testres_create(&ts), *lim;
  devmm_limiting_adaptor_create(up, 1000, &lim);
  ts->fail_at = 1;
  void *p;
  ck_assert_int_eq(devmm_allocate(lim, 100, 0, NULL, &p), DEVMM_ENOMEM);
  size_t used;
  devmm_limiting_get(lim, &used, NULL);
  ck_assert_uint_eq(used, 0);
  devmm_resource_release(lim);
  devmm_resource_release(up);
}
END_TEST

Suite *limiting_suite(void) {
  Suite *s = suite_create("limiting");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, limiting_refuses_over_limit);
  tcase_add_test(tc, limiting_exactly_the_limit);
  tcase_add_test(tc, limiting_upstream_failure_restores_count);
  suite_add_tcase(s, tc);
  return s;
}

/* ================================================================ tracking */

static int count_cb(const devmm_allocation_info *i, void *user) {
  size_t *n = user;
  ck_assert_uint_gt(i->bytes, 0);
  (*n)++;
  return 0;
}

START_TEST(tracking_lookup_inside) {
  devmm_resource *up = testres_create(NULL), *tr;
  ck_assert_int_eq(devmm_tracking_adaptor_create(up, 0, &tr), DEVMM_OK);
  enum { N = 500 };
  char *p[N];
  for (int i = 0; i < N; i++)
    ck_assert_int_eq(devmm_allocate(tr, (size_t)(i + 1) * 8, 0, NULL, (void **)&p[i]), 0);
  for (int i = 0; i < N; i += 7) {
    devmm_allocation_info info;
    ck_assert_int_eq(devmm_tracking_lookup(tr, p[i] + i * 8 + 7, &info), DEVMM_OK);
    ck_assert_ptr_eq(info.ptr, p[i]);
    ck_assert_uint_eq(info.bytes, (size_t)(i + 1) * 8);
    ck_assert_int_eq(info.nframes, 0);
  }
  size_t count, bytes, walked = 0;
  devmm_tracking_outstanding(tr, &count, &bytes);
  ck_assert_uint_eq(count, N);
  ck_assert_uint_eq(bytes, 8u * N * (N + 1) / 2);
  devmm_tracking_foreach(tr, count_cb, &walked);
  ck_assert_uint_eq(walked, N);
  for (int i = 0; i < N; i += 2)
    devmm_deallocate(tr, p[i], (size_t)(i + 1) * 8, 0, NULL);
  devmm_allocation_info info;
  devmm_tracking_outstanding(tr, &count, NULL);
  ck_assert_uint_eq(count, N / 2);
  for (int i = 1; i < N; i += 2)
    devmm_deallocate(tr, p[i], (size_t)(i + 1) * 8, 0, NULL);
  ck_assert_int_eq(devmm_tracking_lookup(tr, p[3], &info), DEVMM_ENOENT);
  ck_assert_error_contains("is not inside a live allocation");
  devmm_tracking_outstanding(tr, &count, &bytes);
  ck_assert_uint_eq(count, 0);
  ck_assert_uint_eq(bytes, 0);
  devmm_resource_release(tr);
  devmm_resource_release(up);
}
END_TEST

/* The first and last byte of a live allocation are inside it; one past the end and one before
 * the start are not. */
START_TEST(tracking_lookup_bounds) {
  devmm_resource *up = testres_create(NULL), *tr;
  ck_assert_int_eq(devmm_tracking_adaptor_create(up, 0, &tr), DEVMM_OK);
  char *p;
  ck_assert_int_eq(devmm_allocate(tr, 64, 0, NULL, (void **)&p), DEVMM_OK);
  devmm_allocation_info info;
  ck_assert_int_eq(devmm_tracking_lookup(tr, p, &info), DEVMM_OK);
  ck_assert_ptr_eq(info.ptr, p);
  ck_assert_uint_eq(info.bytes, 64);
  ck_assert_int_eq(devmm_tracking_lookup(tr, p + 63, &info), DEVMM_OK);
  ck_assert_ptr_eq(info.ptr, p);
  ck_assert_int_eq(devmm_tracking_lookup(tr, p + 64, &info), DEVMM_ENOENT);
  ck_assert_error_contains("is not inside a live allocation");
  ck_assert_int_eq(devmm_tracking_lookup(tr, p - 1, &info), DEVMM_ENOENT);
  ck_assert_int_eq(devmm_deallocate(tr, p, 64, 0, NULL), DEVMM_OK);
  devmm_resource_release(tr);
  devmm_resource_release(up);
}
END_TEST

START_TEST(tracking_catches_double_free_and_size_mismatch) {
  testres *ts;
  devmm_resource *up = testres_create(&ts), *tr;
  devmm_tracking_adaptor_create(up, 0, &tr);
  void *p;
  devmm_allocate(tr, 64, 0, NULL, &p);
  ck_assert_int_eq(devmm_deallocate(tr, p, 32, 0, NULL), DEVMM_EINVAL);
  ck_assert_error_contains("allocated with 64 bytes but freed with 32");
  ck_assert_int_eq(ts->frees, 0);
  ck_assert_int_eq(devmm_deallocate(tr, p, 64, 0, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_deallocate(tr, p, 64, 0, NULL), DEVMM_EINVAL);
  ck_assert_error_contains("not a live allocation");
  ck_assert_int_eq(ts->frees, 1); /* the double free never reached the upstream */
  devmm_resource_release(tr);
  devmm_resource_release(up);
}
END_TEST

START_TEST(tracking_backtraces_and_report) {
  devmm_resource *up = testres_create(NULL), *tr;
  ck_assert_int_eq(devmm_tracking_adaptor_create(up, 1, &tr), DEVMM_OK);
  void *p, *q;
  devmm_allocate(tr, 48, 0, NULL, &p);
  devmm_allocate(tr, 16, 0, NULL, &q);
  devmm_allocation_info info;
  ck_assert_int_eq(devmm_tracking_lookup(tr, p, &info), DEVMM_OK);
  ck_assert_int_gt(info.nframes, 1);
  ck_assert_uint_gt(info.thread_id, 0);
  char *report;
  ck_assert_int_eq(devmm_tracking_report(tr, &report), DEVMM_OK);
  ck_assert_ptr_nonnull(strstr(report, "2 outstanding allocations, 64 bytes"));
  ck_assert_ptr_nonnull(strstr(report, "48 bytes"));
  ck_assert_ptr_nonnull(strstr(report, "#0 "));
  devmm_string_free(report);
  devmm_deallocate(tr, p, 48, 0, NULL);
  /* q is still live: destroying the adaptor must not leak its frames (ASan checks) */
  devmm_resource_release(tr);
  devmm_resource_release(up);
  free(q);
}
END_TEST

Suite *tracking_suite(void) {
  Suite *s = suite_create("tracking");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, tracking_lookup_inside);
  tcase_add_test(tc, tracking_lookup_bounds);
  tcase_add_test(tc, tracking_catches_double_free_and_size_mismatch);
  tcase_add_test(tc, tracking_backtraces_and_report);
  suite_add_tcase(s, tc);
  return s;
}

/* ================================================================ logging */

START_TEST(logging_csv) {
  char path[TESTRES_PATH_MAX];
  close(testres_mkstemp(path, sizeof path, "log"));
  testres *ts;
  devmm_resource *up = testres_create(&ts), *lg;
  ck_assert_int_eq(devmm_logging_adaptor_create(up, path, 0, &lg), DEVMM_OK);
  void *p;
  devmm_allocate(lg, 77, 0, NULL, &p);
  devmm_deallocate(lg, p, 77, 0, NULL);
  ts->fail_at = ts->allocs + 1;
  ck_assert_int_eq(devmm_allocate(lg, 5, 0, NULL, &p), DEVMM_ENOMEM);
  devmm_resource_release(lg);
  FILE *f = fopen(path, "r");
  char line[256];
  ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
  ck_assert_str_eq(line, "Thread,Time,Action,Pointer,Size,Stream\n");
  ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
  ck_assert_ptr_nonnull(strstr(line, ",allocate,0x"));
  ck_assert_ptr_nonnull(strstr(line, ",77,"));
  ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
  ck_assert_ptr_nonnull(strstr(line, ",free,"));
  ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
  ck_assert_ptr_nonnull(strstr(line, ",allocate failure,"));
  int commas = 0;
  for (char *c = line; *c; c++)
    commas += *c == ',';
  ck_assert_int_eq(commas, 5);
  fclose(f);
  unlink(path);
  ck_assert_int_eq(devmm_logging_adaptor_create(up, "/nonexistent-dir/x.csv", 0, &lg), DEVMM_EIO);
  ck_assert_error_contains("cannot open log file '/nonexistent-dir/x.csv'");
  ck_assert_ptr_null(lg);
  devmm_resource_release(up);
}
END_TEST

Suite *logging_suite(void) {
  Suite *s = suite_create("logging");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, logging_csv);
  suite_add_tcase(s, tc);
  return s;
}

/* ================================================================ aligned */

/* An upstream that only knows 16-byte alignment and refuses more, like cudaMalloc's fixed one. */
static int fixed_alloc(devmm_resource *self, size_t b, size_t a, devmm_stream s, void **o) {
  (void)self, (void)s;
  if (a > 16)
    return devmm_set_error(DEVMM_ENOTSUP, "fixed: alignment %zu unsupported", a);
  *o = malloc(b);
  return *o ? DEVMM_OK : DEVMM_ENOMEM;
}
static int fixed_free(devmm_resource *self, void *p, size_t b, size_t a, devmm_stream s) {
  (void)self, (void)b, (void)a, (void)s;
  free(p);
  return DEVMM_OK;
}

START_TEST(aligned_over_allocates_when_needed) {
  static const devmm_resource_ops ops = {sizeof ops, fixed_alloc, fixed_free};
  devmm_resource *fixed, *al;
  devmm_device cpu = {DEVMM_DEVICE_CPU, 0};
  ck_assert_int_eq(devmm_resource_create(&ops, NULL, cpu, "fixed", 0, &fixed), DEVMM_OK);
  ck_assert_int_eq(devmm_aligned_adaptor_create(fixed, 4096, 1000, &al), DEVMM_OK);
  void *big[8], *small;
  for (int i = 0; i < 8; i++) {
    ck_assert_int_eq(devmm_allocate(al, 5000, 0, NULL, &big[i]), DEVMM_OK);
    ck_assert_uint_eq((uintptr_t)big[i] % 4096, 0);
    memset(big[i], 0xab, 5000);
  }
  ck_assert_int_eq(devmm_allocate(al, 100, 0, NULL, &small), DEVMM_OK); /* under threshold */
  for (int i = 0; i < 8; i++)
    ck_assert_int_eq(devmm_deallocate(al, big[i], 5000, 0, NULL), DEVMM_OK);
  devmm_deallocate(al, small, 100, 0, NULL);
  devmm_resource_release(al);
  devmm_resource_release(fixed);
  /* with an upstream that can align itself, no over-allocation is needed */
  devmm_resource *up = testres_create(NULL);
  ck_assert_int_eq(devmm_aligned_adaptor_create(up, 256, 0, &al), DEVMM_OK);
  void *p;
  ck_assert_int_eq(devmm_allocate(al, 10, 0, NULL, &p), DEVMM_OK);
  ck_assert_uint_eq((uintptr_t)p % 256, 0);
  devmm_deallocate(al, p, 10, 0, NULL);
  devmm_resource_release(al);
  ck_assert_int_eq(devmm_aligned_adaptor_create(up, 48, 0, &al), DEVMM_EINVAL);
  ck_assert_error_contains("alignment 48 is not a power of two");
  devmm_resource_release(up);
}
END_TEST

Suite *aligned_suite(void) {
  Suite *s = suite_create("aligned");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, aligned_over_allocates_when_needed);
  suite_add_tcase(s, tc);
  return s;
}

/* ================================================================ failure callback */

typedef struct {
  int calls, retries_allowed;
  testres *ts;
} fc_state;

static int on_oom(size_t bytes, int attempt, void *user) {
  fc_state *st = user;
  ck_assert_uint_eq(bytes, 64);
  ck_assert_int_eq(attempt, st->calls);
  st->calls++;
  if (st->calls >= st->retries_allowed)
    return 0;
  if (st->calls == 2)
    st->ts->fail_from = 0; /* "collect garbage": the next attempt succeeds */
  return 1;
}

START_TEST(failure_callback_retries) {
  testres *ts;
  devmm_resource *up = testres_create(&ts), *fc;
  fc_state st = {0, 10, ts};
  ck_assert_int_eq(devmm_failure_callback_adaptor_create(up, on_oom, &st, &fc), DEVMM_OK);
  ts->fail_from = 1;
  void *p;
  ck_assert_int_eq(devmm_allocate(fc, 64, 0, NULL, &p), DEVMM_OK);
  ck_assert_int_eq(st.calls, 2);
  devmm_deallocate(fc, p, 64, 0, NULL);
  /* a callback that gives up: the upstream's message survives, with the attempts */
  st.calls = 0;
  st.retries_allowed = 3;
  ts->fail_from = 1;
  st.ts = &(testres){0}; /* don't let it recover */
  ck_assert_int_eq(devmm_allocate(fc, 64, 0, NULL, &p), DEVMM_ENOMEM);
  ck_assert_error_contains("injected failure");
  ck_assert_error_contains("gave up after 3 attempts");
  devmm_resource_release(fc);
  ck_assert_int_eq(devmm_failure_callback_adaptor_create(up, NULL, NULL, &fc), DEVMM_EINVAL);
  ck_assert_error_contains("callback is NULL");
  devmm_resource_release(up);
}
END_TEST

Suite *failure_suite(void) {
  Suite *s = suite_create("failure");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, failure_callback_retries);
  suite_add_tcase(s, tc);
  return s;
}

/* ================================================================ thread-safe */

typedef struct {
  int inside; /* deliberately not atomic: the upstream is not thread-safe */
  int overlaps;
  long n;
} unsafe_state;

static int unsafe_alloc(devmm_resource *self, size_t b, size_t a, devmm_stream s, void **o) {
  (void)a, (void)s;
  unsafe_state *u = devmm_resource_context(self);
  if (__atomic_fetch_add(&u->inside, 1, __ATOMIC_SEQ_CST))
    __atomic_fetch_add(&u->overlaps, 1, __ATOMIC_SEQ_CST);
  u->n++;
  *o = malloc(b);
  for (volatile int i = 0; i < 50; i++)
    ;
  __atomic_fetch_sub(&u->inside, 1, __ATOMIC_SEQ_CST);
  return DEVMM_OK;
}
static int unsafe_free(devmm_resource *self, void *p, size_t b, size_t a, devmm_stream s) {
  (void)b, (void)a, (void)s;
  unsafe_state *u = devmm_resource_context(self);
  if (__atomic_fetch_add(&u->inside, 1, __ATOMIC_SEQ_CST))
    __atomic_fetch_add(&u->overlaps, 1, __ATOMIC_SEQ_CST);
  u->n++;
  free(p);
  __atomic_fetch_sub(&u->inside, 1, __ATOMIC_SEQ_CST);
  return DEVMM_OK;
}

static void *hammer(void *arg) {
  devmm_resource *r = arg;
  for (int i = 0; i < 20000; i++) {
    void *p;
    ck_assert_int_eq(devmm_allocate(r, 32, 0, NULL, &p), DEVMM_OK);
    devmm_deallocate(r, p, 32, 0, NULL);
  }
  return NULL;
}

START_TEST(thread_safe_serialises) {
  static const devmm_resource_ops ops = {sizeof ops, unsafe_alloc, unsafe_free};
  unsafe_state u = {0};
  devmm_resource *raw, *ts;
  devmm_device cpu = {DEVMM_DEVICE_CPU, 0};
  ck_assert_int_eq(devmm_resource_create(&ops, &u, cpu, "unsafe", 0, &raw), DEVMM_OK);
  ck_assert_int_eq(devmm_thread_safe_adaptor_create(raw, &ts), DEVMM_OK);
  ck_assert(devmm_resource_flags(ts) & DEVMM_RESOURCE_THREAD_SAFE);
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, hammer, ts);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  ck_assert_int_eq(u.overlaps, 0);
  ck_assert_int_eq(u.n, 2 * 2 * 20000); /* no lost updates of the non-atomic counter */
  devmm_resource_release(ts);
  devmm_resource_release(raw);
}
END_TEST

Suite *thread_safe_suite(void) {
  Suite *s = suite_create("thread_safe");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, thread_safe_serialises);
  suite_add_tcase(s, tc);
  return s;
}
