/* Suites: statistics, limiting, tracking, logging, aligned, failure, thread_safe. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "testres.h"

static devmm_statistics stats_of(devmm_resource *st) {
  devmm_statistics s;
  ck_assert_int_eq(devmm_statistics_get(st, &s), DEVMM_OK);
  return s;
}

/* ================================================================ every adaptor */

/* A resource that records every optional op it is asked for, so that a test can see what an
 * adaptor passed down: the call, its arguments, and the status coming back up. */
typedef struct {
  int mem_info, copy, memset, stream_wait, synchronize, fail;
  void *dst;
  const void *src;
  size_t bytes;
  int value;
  devmm_stream a, b;
} recorder;

#define REC(self) ((recorder *)devmm_resource_context(self))
#define REC_RESULT(self, what)                                                                     \
  (REC(self)->fail ? devmm_set_error(DEVMM_EIO, "recorder: " what " failed") : DEVMM_OK)

static int rec_alloc(devmm_resource *self, size_t b, size_t a, devmm_stream s, void **o) {
  (void)self, (void)a, (void)s;
  *o = malloc(b);
  return *o ? DEVMM_OK : DEVMM_ENOMEM;
}
static int rec_free(devmm_resource *self, void *p, size_t b, size_t a, devmm_stream s) {
  (void)self, (void)b, (void)a, (void)s;
  free(p);
  return DEVMM_OK;
}
static int rec_mem_info(devmm_resource *self, size_t *f, size_t *t) {
  REC(self)->mem_info++;
  *f = 111, *t = 222;
  return REC_RESULT(self, "mem_info");
}
static int rec_copy(devmm_resource *self, void *d, const void *s, size_t n, devmm_stream st) {
  recorder *r = REC(self);
  r->copy++, r->dst = d, r->src = s, r->bytes = n, r->a = st;
  return REC_RESULT(self, "copy");
}
static int rec_memset(devmm_resource *self, void *d, int v, size_t n, devmm_stream st) {
  recorder *r = REC(self);
  r->memset++, r->dst = d, r->value = v, r->bytes = n, r->a = st;
  return REC_RESULT(self, "memset");
}
static int rec_stream_wait(devmm_resource *self, devmm_stream a, devmm_stream b) {
  recorder *r = REC(self);
  r->stream_wait++, r->a = a, r->b = b;
  return REC_RESULT(self, "stream_wait");
}
static int rec_synchronize(devmm_resource *self, devmm_stream s) {
  recorder *r = REC(self);
  r->synchronize++, r->a = s;
  return REC_RESULT(self, "synchronize");
}
static const devmm_resource_ops rec_ops = {sizeof rec_ops,  rec_alloc,       rec_free,
                                           rec_mem_info,    rec_copy,        rec_memset,
                                           rec_stream_wait, rec_synchronize, NULL};

static int make_failure(devmm_resource *up, devmm_resource **out);
static int make_logging(devmm_resource *up, devmm_resource **out) {
  return devmm_logging_adaptor_create(up, "/dev/null", 0, out);
}
static int make_aligned(devmm_resource *up, devmm_resource **out) {
  return devmm_aligned_adaptor_create(up, 64, 0, out);
}
static int make_tracking(devmm_resource *up, devmm_resource **out) {
  return devmm_tracking_adaptor_create(up, 0, out);
}
static int make_sharded(devmm_resource *up, devmm_resource **out) {
  return devmm_statistics_adaptor_create_ex(up, DEVMM_STATISTICS_SHARDED, out);
}
static int refuse_retry(size_t b, int a, void *u) {
  (void)b, (void)a, (void)u;
  return 0;
}
static int make_failure(devmm_resource *up, devmm_resource **out) {
  return devmm_failure_callback_adaptor_create(up, refuse_retry, NULL, out);
}

static const struct {
  const char *name;
  int (*make)(devmm_resource *up, devmm_resource **out);
} forwarding[] = {
    {"statistics", devmm_statistics_adaptor_create},
    {"statistics (sharded)", make_sharded},
    {"tracking", make_tracking},
    {"logging", make_logging},
    {"aligned", make_aligned},
    {"failure_callback", make_failure},
    {"thread_safe", devmm_thread_safe_adaptor_create},
};

/* Each adaptor passes mem_info, copy, memset, stream_wait and synchronize to its upstream once,
 * with the caller's arguments, and hands the upstream's status and message back. */
START_TEST(adaptors_forward_every_optional_op) {
  recorder rec = {0};
  devmm_device cpu = {DEVMM_DEVICE_CPU, 0};
  devmm_resource *up, *ad;
  ck_assert_int_eq(devmm_resource_create(&rec_ops, &rec, cpu, "recorder", 0, &up), DEVMM_OK);
  ck_assert_msg(forwarding[_i].make(up, &ad) == DEVMM_OK, "%s: %s", forwarding[_i].name,
                devmm_last_error());
  char a[8], b[8];
  devmm_stream s1 = (devmm_stream)0x10, s2 = (devmm_stream)0x20;
  for (int fail = 0; fail < 2; fail++) {
    rec.fail = fail;
    int want = fail ? DEVMM_EIO : DEVMM_OK;
    size_t f = 0, t = 0;
    ck_assert_int_eq(devmm_mem_info(ad, &f, &t), want);
    ck_assert_int_eq(rec.mem_info, fail + 1);
    if (!fail)
      ck_assert(f == 111 && t == 222);
    else
      ck_assert_str_eq(devmm_last_error(), "recorder: mem_info failed");
    ck_assert_int_eq(devmm_copy(ad, a, b, 5, s1), want);
    ck_assert(rec.copy == fail + 1 && rec.dst == a && rec.src == b && rec.bytes == 5 &&
              rec.a == s1);
    ck_assert_int_eq(devmm_memset(ad, b, 7, 3, s2), want);
    ck_assert(rec.memset == fail + 1 && rec.dst == b && rec.value == 7 && rec.bytes == 3 &&
              rec.a == s2);
    ck_assert_int_eq(devmm_stream_wait(ad, s1, s2), want);
    ck_assert(rec.stream_wait == fail + 1 && rec.a == s1 && rec.b == s2);
    ck_assert_int_eq(devmm_synchronize(ad, s2), want);
    ck_assert(rec.synchronize == fail + 1 && rec.a == s2);
    if (fail)
      ck_assert_str_eq(devmm_last_error(), "recorder: synchronize failed");
  }
  ck_assert_int_eq(devmm_resource_refcount(up), 2); /* mine and the adaptor's */
  devmm_resource_release(ad);
  ck_assert_int_eq(devmm_resource_refcount(up), 1);
  devmm_resource_release(up);
}
END_TEST

/* The limiting adaptor answers mem_info itself: the limit, and what is left of it (never more
 * than the upstream has). */
START_TEST(limiting_mem_info) {
  recorder rec = {0};
  devmm_device cpu = {DEVMM_DEVICE_CPU, 0};
  devmm_resource *up, *lim;
  ck_assert_int_eq(devmm_resource_create(&rec_ops, &rec, cpu, "recorder", 0, &up), DEVMM_OK);
  ck_assert_int_eq(devmm_limiting_adaptor_create(up, 200, &lim), DEVMM_OK);
  size_t f, t;
  void *p;
  ck_assert_int_eq(devmm_mem_info(lim, &f, &t), DEVMM_OK);
  ck_assert(f == 111 && t == 200); /* upstream's free 111 < 200 left; limit 200 < total 222 */
  ck_assert_int_eq(devmm_allocate(lim, 150, 0, NULL, &p), DEVMM_OK);
  ck_assert_int_eq(devmm_mem_info(lim, &f, &t), DEVMM_OK);
  ck_assert(f == 50 && t == 200); /* 50 left of the limit */
  rec.fail = 1;                   /* an upstream that cannot tell: the limit alone */
  ck_assert_int_eq(devmm_mem_info(lim, &f, &t), DEVMM_OK);
  ck_assert(f == 50 && t == 200);
  ck_assert_str_eq(devmm_last_error(), ""); /* the upstream's failure is not reported */
  rec.fail = 0;
  devmm_deallocate(lim, p, 150, 0, NULL);
  devmm_resource_release(lim);
  ck_assert_int_eq(devmm_limiting_adaptor_create(up, 100, &lim), DEVMM_OK);
  ck_assert_int_eq(devmm_mem_info(lim, &f, &t), DEVMM_OK);
  ck_assert(f == 100 && t == 100); /* the limit is below the upstream's figures */
  devmm_resource_release(lim);
  devmm_resource_release(up);
}
END_TEST

Suite *adaptors_suite(void) {
  Suite *s = suite_create("adaptors");
  TCase *tc = tcase_create("core");
  tcase_add_loop_test(tc, adaptors_forward_every_optional_op, 0,
                      (int)(sizeof forwarding / sizeof forwarding[0]));
  tcase_add_test(tc, limiting_mem_info);
  suite_add_tcase(s, tc);
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

/* A free the upstream refuses (here: tracking, given the wrong size) still holds the bytes. */
START_TEST(limiting_failed_free_keeps_count) {
  testres *ts;
  devmm_resource *base = testres_create(&ts), *tr, *lim;
  ck_assert_int_eq(devmm_tracking_adaptor_create(base, 0, &tr), DEVMM_OK);
  ck_assert_int_eq(devmm_limiting_adaptor_create(tr, 1000, &lim), DEVMM_OK);
  void *p;
  ck_assert_int_eq(devmm_allocate(lim, 600, 0, NULL, &p), DEVMM_OK);
  ck_assert_int_eq(devmm_deallocate(lim, p, 500, 0, NULL), DEVMM_EINVAL);
  ck_assert_error_contains("allocated with 600 bytes but freed with 500");
  size_t used;
  ck_assert_int_eq(devmm_limiting_get(lim, &used, NULL), DEVMM_OK);
  ck_assert_uint_eq(used, 600);
  void *q;
  ck_assert_int_eq(devmm_allocate(lim, 500, 0, NULL, &q), DEVMM_ENOMEM); /* still counted */
  ck_assert_int_eq(devmm_deallocate(lim, p, 600, 0, NULL), DEVMM_OK);
  devmm_resource_release(lim);
  devmm_resource_release(tr);
  devmm_resource_release(base);
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

/* One thread is exact although small requests go through per-thread credit (ADR 29): with a
 * limit of 512 KiB a request of 100 bytes reserves a 1 KiB chunk of credit; the figures never
 * show it, and the whole limit is still available, to the byte, to one request. */
START_TEST(limiting_credit_stays_exact) {
  testres *ts;
  devmm_resource *up = testres_create(&ts), *lim;
  ck_assert_int_eq(devmm_limiting_adaptor_create(up, 512 * 1024, &lim), DEVMM_OK);
  void *a, *b, *c;
  size_t used, f, t;
  ck_assert_int_eq(devmm_allocate(lim, 100, 0, NULL, &a), DEVMM_OK);
  ck_assert_int_eq(devmm_limiting_get(lim, &used, NULL), DEVMM_OK);
  ck_assert_uint_eq(used, 100);
  ck_assert_int_eq(devmm_mem_info(lim, &f, &t), DEVMM_OK);
  ck_assert_uint_eq(f, 512 * 1024 - 100);
  ck_assert_int_eq(devmm_allocate(lim, 200, 0, NULL, &b), DEVMM_OK); /* from the credit */
  ck_assert_int_eq(devmm_limiting_get(lim, &used, NULL), DEVMM_OK);
  ck_assert_uint_eq(used, 300);
  ck_assert_int_eq(devmm_deallocate(lim, a, 100, 0, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_deallocate(lim, b, 200, 0, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_limiting_get(lim, &used, NULL), DEVMM_OK);
  ck_assert_uint_eq(used, 0);
  /* the credit this thread holds is taken back for a request that needs it */
  ck_assert_int_eq(devmm_allocate(lim, 512 * 1024, 0, NULL, &a), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(lim, 1, 0, NULL, &c), DEVMM_ENOMEM);
  ck_assert_error_contains("limit of 524288 bytes (524288 bytes in use)");
  ck_assert_int_eq(devmm_deallocate(lim, a, 512 * 1024, 0, NULL), DEVMM_OK);
  /* frees return what exceeds two chunks: many small frees leave nothing stranded */
  void *p[64];
  for (int i = 0; i < 64; i++)
    ck_assert_int_eq(devmm_allocate(lim, 1000, 0, NULL, &p[i]), DEVMM_OK);
  for (int i = 0; i < 64; i++)
    ck_assert_int_eq(devmm_deallocate(lim, p[i], 1000, 0, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_limiting_get(lim, &used, NULL), DEVMM_OK);
  ck_assert_uint_eq(used, 0);
  ck_assert_int_eq(devmm_allocate(lim, 512 * 1024 - 1, 0, NULL, &a), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(lim, 1, 0, NULL, &b), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(lim, 1, 0, NULL, &c), DEVMM_ENOMEM);
  devmm_deallocate(lim, a, 512 * 1024 - 1, 0, NULL);
  devmm_deallocate(lim, b, 1, 0, NULL);
  ck_assert_int_eq(ts->live_bytes, 0);
  devmm_resource_release(lim);
  devmm_resource_release(up);
}
END_TEST

Suite *limiting_suite(void) {
  Suite *s = suite_create("limiting");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, limiting_refuses_over_limit);
  tcase_add_test(tc, limiting_exactly_the_limit);
  tcase_add_test(tc, limiting_failed_free_keeps_count);
  tcase_add_test(tc, limiting_upstream_failure_restores_count);
  tcase_add_test(tc, limiting_credit_stays_exact);
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

/* Without backtraces the report lists each allocation on one line, and nothing else. */
START_TEST(tracking_report_lists_each) {
  devmm_resource *up = testres_create(NULL), *tr;
  ck_assert_int_eq(devmm_tracking_adaptor_create(up, 0, &tr), DEVMM_OK);
  void *p[3];
  size_t sizes[3] = {48, 16, 1000};
  for (int i = 0; i < 3; i++)
    ck_assert_int_eq(devmm_allocate(tr, sizes[i], 0, NULL, &p[i]), DEVMM_OK);
  char *report, line[128];
  ck_assert_int_eq(devmm_tracking_report(tr, &report), DEVMM_OK);
  const char *head = "tracking(test.malloc): 3 outstanding allocations, 1064 bytes\n";
  ck_assert_msg(strncmp(report, head, strlen(head)) == 0, "%s", report);
  for (int i = 0; i < 3; i++) {
    snprintf(line, sizeof line, "  %p  %zu bytes  stream (nil)\n", p[i], sizes[i]);
    ck_assert_msg(strstr(report, line) != NULL, "'%s' not in '%s'", line, report);
  }
  int lines = 0;
  for (char *c = report; *c; c++)
    lines += *c == '\n';
  ck_assert_int_eq(lines, 4);
  ck_assert_ptr_null(strstr(report, "thread"));
  devmm_string_free(report);
  for (int i = 0; i < 3; i++)
    devmm_deallocate(tr, p[i], sizes[i], 0, NULL);
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
  ck_assert_ptr_nonnull(strstr(report, "16 bytes"));
  ck_assert_ptr_nonnull(strstr(report, "#0 "));
  devmm_string_free(report);
  devmm_deallocate(tr, p, 48, 0, NULL);
  /* q is still live: destroying the adaptor must not leak its frames (ASan checks) */
  devmm_resource_release(tr);
  devmm_resource_release(up);
  free(q);
}
END_TEST

static int stop_after_three(const devmm_allocation_info *i, void *user) {
  (void)i;
  return ++*(size_t *)user == 3;
}

static int ascending_cb(const devmm_allocation_info *i, void *user) {
  uintptr_t *st = user; /* last address, count, out of order */
  st[2] += (uintptr_t)i->ptr <= st[0];
  st[0] = (uintptr_t)i->ptr;
  st[1]++;
  return 0;
}

/* The table is sharded by a hash of each allocation's start (ADR 29): every 16-byte granule of
 * an allocation, whichever shard it hashes to, finds the allocation; the walk merges the shards
 * in address order; a walk stopped early stops. */
START_TEST(tracking_sharded_lookup_and_order) {
  devmm_resource *up = testres_create(NULL), *tr;
  ck_assert_int_eq(devmm_tracking_adaptor_create(up, 0, &tr), DEVMM_OK);
  enum { N = 300 };
  char *p[N];
  size_t size[N];
  for (int i = 0; i < N; i++) {
    size[i] = 16 + (size_t)(i * 37 % 8192);
    ck_assert_int_eq(devmm_allocate(tr, size[i], 0, NULL, (void **)&p[i]), DEVMM_OK);
  }
  for (int i = 0; i < N; i++) {
    devmm_allocation_info info;
    for (size_t off = 0; off < size[i]; off += 16) {
      ck_assert_int_eq(devmm_tracking_lookup(tr, p[i] + off, &info), DEVMM_OK);
      ck_assert_ptr_eq(info.ptr, p[i]);
      ck_assert_uint_eq(info.bytes, size[i]);
    }
    ck_assert_int_eq(devmm_tracking_lookup(tr, p[i] + size[i] - 1, &info), DEVMM_OK);
    ck_assert_ptr_eq(info.ptr, p[i]);
    if (devmm_tracking_lookup(tr, p[i] + size[i], &info) == DEVMM_OK)
      ck_assert_ptr_ne(info.ptr, p[i]); /* one past the end: another allocation or none */
  }
  uintptr_t st[3] = {0, 0, 0};
  ck_assert_int_eq(devmm_tracking_foreach(tr, ascending_cb, st), DEVMM_OK);
  ck_assert_uint_eq(st[1], N);
  ck_assert_uint_eq(st[2], 0);
  size_t seen = 0;
  ck_assert_int_eq(devmm_tracking_foreach(tr, stop_after_three, &seen), DEVMM_OK);
  ck_assert_uint_eq(seen, 3);
  for (int i = 0; i < N; i++)
    ck_assert_int_eq(devmm_deallocate(tr, p[i], size[i], 0, NULL), DEVMM_OK);
  st[0] = st[1] = st[2] = 0;
  ck_assert_int_eq(devmm_tracking_foreach(tr, ascending_cb, st), DEVMM_OK);
  ck_assert_uint_eq(st[1], 0);
  devmm_resource_release(tr);
  devmm_resource_release(up);
}
END_TEST

Suite *tracking_suite(void) {
  Suite *s = suite_create("tracking");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, tracking_lookup_inside);
  tcase_add_test(tc, tracking_lookup_bounds);
  tcase_add_test(tc, tracking_catches_double_free_and_size_mismatch);
  tcase_add_test(tc, tracking_report_lists_each);
  tcase_add_test(tc, tracking_backtraces_and_report);
  tcase_add_test(tc, tracking_sharded_lookup_and_order);
  suite_add_tcase(s, tc);
  return s;
}

/* ================================================================ logging */

/* Microseconds since local midnight, as the log's Time column counts them. */
static long long time_of_day_us(void) {
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  localtime_r(&ts.tv_sec, &tm);
  return ((tm.tm_hour * 60LL + tm.tm_min) * 60 + tm.tm_sec) * 1000000 + ts.tv_nsec / 1000;
}

START_TEST(logging_csv) {
  char path[TESTRES_PATH_MAX];
  close(testres_mkstemp(path, sizeof path, "log"));
  testres *ts;
  devmm_resource *up = testres_create(&ts), *lg;
  ck_assert_int_eq(devmm_logging_adaptor_create(up, path, 0, &lg), DEVMM_OK);
  void *p;
  long long before = time_of_day_us();
  devmm_allocate(lg, 77, 0, NULL, &p);
  long long after = time_of_day_us();
  devmm_deallocate(lg, p, 77, 0, NULL);
  ts->fail_at = ts->allocs + 1;
  ck_assert_int_eq(devmm_allocate(lg, 5, 0, NULL, &p), DEVMM_ENOMEM);
  ck_assert_int_eq(ts->live_bytes, 0); /* the free reached the upstream with its size */
  ck_assert_int_eq(ts->frees, 1);
  devmm_resource_release(lg);
  FILE *f = fopen(path, "r");
  char line[256];
  ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
  ck_assert_str_eq(line, "Thread,Time,Action,Pointer,Size,Stream\n");
  ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
  ck_assert_ptr_nonnull(strstr(line, ",allocate,0x"));
  ck_assert_ptr_nonnull(strstr(line, ",77,"));
  /* Time: the local time of day to the microsecond, between the clock before and after */
  int hh, mm, ss;
  long us;
  ck_assert_int_eq(sscanf(strchr(line, ',') + 1, "%d:%d:%d:%ld,", &hh, &mm, &ss, &us), 4);
  long long logged = ((hh * 60LL + mm) * 60 + ss) * 1000000 + us;
  ck_assert_msg(logged >= before && logged <= after, "logged %lld, not in [%lld, %lld]", logged,
                before, after);
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

static long file_size(const char *path) {
  struct stat st;
  ck_assert_int_eq(stat(path, &st), 0);
  return (long)st.st_size;
}

/* Without auto-flush the lines wait in the stream's buffer until a flush; with it, each line is
 * in the file at once. A flush that fails says so; a free the upstream refuses is logged as a
 * "free failure" and its status comes back; logging to stderr leaves stderr open. */
START_TEST(logging_flush_failures_and_stderr) {
  char path[TESTRES_PATH_MAX];
  close(testres_mkstemp(path, sizeof path, "log"));
  devmm_resource *up = testres_create(NULL), *tr, *lg;
  ck_assert_int_eq(devmm_tracking_adaptor_create(up, 0, &tr), DEVMM_OK);
  ck_assert_int_eq(devmm_logging_adaptor_create(tr, path, 0, &lg), DEVMM_OK);
  void *p;
  ck_assert_int_eq(devmm_allocate(lg, 32, 0, NULL, &p), DEVMM_OK);
  ck_assert_int_eq(file_size(path), 0); /* buffered */
  ck_assert_int_eq(devmm_logging_flush(lg), DEVMM_OK);
  long flushed = file_size(path);
  ck_assert_int_gt(flushed, 0);
  ck_assert_int_eq(devmm_deallocate(lg, p, 16, 0, NULL), DEVMM_EINVAL); /* wrong size */
  ck_assert_error_contains("allocated with 32 bytes but freed with 16");
  ck_assert_int_eq(devmm_deallocate(lg, p, 32, 0, NULL), DEVMM_OK);
  devmm_resource_release(lg);
  char *text = NULL;
  size_t n = 0;
  FILE *f = fopen(path, "r");
  ck_assert_int_gt(getdelim(&text, &n, '\0', f), 0);
  fclose(f);
  ck_assert_msg(strstr(text, ",free failure,") && strstr(text, ",free,"), "%s", text);
  free(text);
  /* auto-flush: in the file at once */
  ck_assert_int_eq(devmm_logging_adaptor_create(tr, path, 1, &lg), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(lg, 8, 0, NULL, &p), DEVMM_OK);
  ck_assert_int_gt(file_size(path), 40);
  ck_assert_int_eq(devmm_deallocate(lg, p, 8, 0, NULL), DEVMM_OK);
  devmm_resource_release(lg);
  unlink(path);
  /* a device that is always full: the flush fails with a message */
  ck_assert_int_eq(devmm_logging_adaptor_create(tr, "/dev/full", 0, &lg), DEVMM_OK);
  ck_assert_int_eq(devmm_logging_flush(lg), DEVMM_EIO);
  ck_assert_str_eq(devmm_last_error(),
                   "logging adaptor 'logging(tracking(test.malloc))': flush failed");
  devmm_resource_release(lg);
  /* stderr: the adaptor does not own it */
  ck_assert_int_eq(devmm_logging_adaptor_create(tr, NULL, 0, &lg), DEVMM_OK);
  devmm_resource_release(lg);
  ck_assert_int_ne(fcntl(2, F_GETFD), -1);
  ck_assert_int_ge(fprintf(stderr, "%s", ""), 0);
  ck_assert_int_eq(devmm_logging_flush(up), DEVMM_EINVAL);
  ck_assert_error_contains("is not a logging adaptor");
  devmm_resource_release(tr);
  devmm_resource_release(up);
}
END_TEST

Suite *logging_suite(void) {
  Suite *s = suite_create("logging");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, logging_csv);
  tcase_add_test(tc, logging_flush_failures_and_stderr);
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

/* A strict upstream: it remembers each allocation's size and alignment, refuses a free that
 * does not match them exactly (as a GPU pool would misbehave), can refuse large alignments with
 * a chosen status, and counts everything. */
#define STRICT_MAX 4096
typedef struct {
  pthread_mutex_t lock;
  int refuse_above; /* alignments above this are refused with `refusal` */
  int refusal;      /* DEVMM_ENOTSUP or DEVMM_EINVAL or DEVMM_ENOMEM */
  int allocs, frees, mismatches, live;
  struct {
    void *p;
    size_t bytes, align;
  } a[STRICT_MAX];
} strict;

static int strict_alloc(devmm_resource *self, size_t b, size_t al, devmm_stream s, void **o) {
  (void)s;
  strict *st = devmm_resource_context(self);
  if (st->refuse_above && al > (size_t)st->refuse_above) {
    *o = NULL;
    return devmm_set_error(st->refusal, "strict: alignment %zu refused", al);
  }
  void *p = NULL;
  if (posix_memalign(&p, al > sizeof(void *) ? al : sizeof(void *), b ? b : 1))
    return devmm_set_error(DEVMM_ENOMEM, "strict: out of memory");
  pthread_mutex_lock(&st->lock);
  int i = 0;
  while (i < STRICT_MAX - 1 && st->a[i].p)
    i++;
  ck_assert_ptr_null(st->a[i].p); /* a full table fails the test */
  st->a[i].p = p, st->a[i].bytes = b, st->a[i].align = al;
  st->allocs++, st->live++;
  pthread_mutex_unlock(&st->lock);
  *o = p;
  return DEVMM_OK;
}

static int strict_free(devmm_resource *self, void *p, size_t b, size_t al, devmm_stream s) {
  (void)s;
  strict *st = devmm_resource_context(self);
  pthread_mutex_lock(&st->lock);
  int i = 0;
  while (i < STRICT_MAX && st->a[i].p != p)
    i++;
  int ok = i < STRICT_MAX && st->a[i].bytes == b && st->a[i].align == al;
  if (ok) {
    st->a[i].p = NULL;
    st->frees++, st->live--;
  } else {
    st->mismatches++;
  }
  pthread_mutex_unlock(&st->lock);
  if (!ok)
    return devmm_set_error(DEVMM_EINVAL, "strict: free(%p, %zu, %zu) matches no allocation", p, b,
                           al);
  free(p);
  return DEVMM_OK;
}

static devmm_resource *strict_create(strict *st, int refuse_above, int refusal) {
  static const devmm_resource_ops ops = {sizeof ops, strict_alloc, strict_free};
  memset(st, 0, sizeof *st);
  pthread_mutex_init(&st->lock, NULL);
  st->refuse_above = refuse_above, st->refusal = refusal;
  devmm_resource *r;
  devmm_device cpu = {DEVMM_DEVICE_CPU, 0};
  ck_assert_int_eq(devmm_resource_create(&ops, st, cpu, "strict", 0, &r), DEVMM_OK);
  return r;
}

/* Many over-allocated blocks (so that the adaptor's table has collisions), freed in another
 * order: each free reaches the upstream with exactly what was allocated. Both refusals the
 * adaptor works around (ENOTSUP, EINVAL) are tried; any other failure is passed on. */
START_TEST(aligned_frees_exactly_what_was_allocated) {
  static strict st;
  int refusal = _i ? DEVMM_EINVAL : DEVMM_ENOTSUP;
  devmm_resource *up = strict_create(&st, 16, refusal), *al;
  ck_assert_int_eq(devmm_aligned_adaptor_create(up, 256, 64, &al), DEVMM_OK);
  enum { N = 600 };
  static void *p[N];
  for (int i = 0; i < N; i++) {
    size_t n = 64 + (size_t)i;
    ck_assert_msg(devmm_allocate(al, n, 0, NULL, &p[i]) == DEVMM_OK, "%s", devmm_last_error());
    ck_assert_uint_eq((uintptr_t)p[i] % 256, 0);
    memset(p[i], 1, n);
  }
  void *small;
  ck_assert_int_eq(devmm_allocate(al, 10, 0, NULL, &small), DEVMM_OK); /* under the threshold */
  for (int i = N - 1; i >= 0; i -= 2)
    ck_assert_msg(devmm_deallocate(al, p[i], 64 + (size_t)i, 0, NULL) == DEVMM_OK, "%s",
                  devmm_last_error());
  for (int i = 0; i < N; i += 2)
    ck_assert_msg(devmm_deallocate(al, p[i], 64 + (size_t)i, 0, NULL) == DEVMM_OK, "%s",
                  devmm_last_error());
  ck_assert_int_eq(devmm_deallocate(al, small, 10, 0, NULL), DEVMM_OK);
  ck_assert_int_eq(st.mismatches, 0);
  ck_assert_int_eq(st.live, 0);
  ck_assert_int_eq(st.allocs, N + 1);
  /* a request that already asks for the alignment goes to the upstream as it is */
  ck_assert_int_eq(devmm_allocate(al, 100, 512, NULL, &small), refusal);
  ck_assert_error_contains("strict: alignment 512 refused");
  devmm_resource_release(al);
  /* an upstream that honours the alignment: asked for it, and freed with it */
  devmm_resource *up2 = strict_create(&st, 0, 0);
  ck_assert_int_eq(devmm_aligned_adaptor_create(up2, 256, 0, &al), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(al, 100, 0, NULL, &small), DEVMM_OK);
  ck_assert_uint_eq(st.a[0].align, 256);
  ck_assert_int_eq(devmm_deallocate(al, small, 100, 0, NULL), DEVMM_OK);
  ck_assert_int_eq(st.mismatches + st.live, 0);
  devmm_resource_release(al);
  devmm_resource_release(up2);
  /* any other failure is the answer, without over-allocating */
  devmm_resource *up3 = strict_create(&st, 16, DEVMM_ENOMEM);
  ck_assert_int_eq(devmm_aligned_adaptor_create(up3, 256, 0, &al), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(al, 100, 0, NULL, &small), DEVMM_ENOMEM);
  ck_assert_error_contains("strict: alignment 256 refused");
  ck_assert_int_eq(st.allocs, 0);
  devmm_resource_release(al);
  devmm_resource_release(up3);
  devmm_resource_release(up);
}
END_TEST

typedef struct {
  devmm_resource *r;
  int base;
} aligned_worker;

static void *aligned_churn(void *arg) {
  aligned_worker *w = arg;
  void *p[32];
  for (int round = 0; round < 300; round++) {
    for (int i = 0; i < 32; i++)
      ck_assert_int_eq(devmm_allocate(w->r, 100 + (size_t)(w->base + i), 0, NULL, &p[i]), 0);
    for (int i = 0; i < 32; i++)
      ck_assert_int_eq(devmm_deallocate(w->r, p[i], 100 + (size_t)(w->base + i), 0, NULL), 0);
  }
  return NULL;
}

/* Two threads over-allocating through one adaptor: its table stays consistent. */
START_TEST(aligned_two_threads) {
  static strict st;
  devmm_resource *up = strict_create(&st, 16, DEVMM_ENOTSUP), *al;
  ck_assert_int_eq(devmm_aligned_adaptor_create(up, 128, 0, &al), DEVMM_OK);
  pthread_t t[2];
  aligned_worker w[2] = {{al, 0}, {al, 1000}};
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, aligned_churn, &w[i]);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  ck_assert_int_eq(st.mismatches, 0);
  ck_assert_int_eq(st.live, 0);
  ck_assert_int_eq(st.allocs, 2 * 300 * 32);
  devmm_resource_release(al);
  devmm_resource_release(up);
}
END_TEST

START_TEST(aligned_bad_alignments) {
  devmm_resource *up = testres_create(NULL), *al = (devmm_resource *)1;
  size_t bad[] = {0, 3, 6, 12, 48, 96};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    al = (devmm_resource *)1;
    ck_assert_int_eq(devmm_aligned_adaptor_create(up, bad[i], 0, &al), DEVMM_EINVAL);
    char want[80];
    snprintf(want, sizeof want, "aligned adaptor: alignment %zu is not a power of two", bad[i]);
    ck_assert_error_contains(want);
    ck_assert_ptr_null(al); /* out is cleared on failure */
  }
  size_t good[] = {1, 2, 4096};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    ck_assert_int_eq(devmm_aligned_adaptor_create(up, good[i], 0, &al), DEVMM_OK);
    devmm_resource_release(al);
  }
  devmm_resource_release(up);
}
END_TEST

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
  tcase_add_loop_test(tc, aligned_frees_exactly_what_was_allocated, 0, 2);
  tcase_add_test(tc, aligned_two_threads);
  tcase_add_test(tc, aligned_bad_alignments);
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
