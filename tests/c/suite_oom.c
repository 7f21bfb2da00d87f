/* Suite oom: out-of-memory explanations (include/devmm/oom.h) and devmm_last_oom. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "testres.h"
START_TEST(oom_explains_itself) {
  devmm_resource *up = testres_create(NULL), *tr, *st, *lim;
  devmm_tracking_options o = {sizeof o, 1, 0, NULL, NULL, NULL, NULL};
  ck_assert_int_eq(devmm_tracking_adaptor_create_ex(up, &o, &tr), DEVMM_OK);
  ck_assert_int_eq(devmm_statistics_adaptor_create(tr, &st), DEVMM_OK);
  ck_assert_int_eq(devmm_limiting_adaptor_create(st, 10000, &lim), DEVMM_OK);
  void *a, *b, *c, *p = (void *)1;
  ck_assert_int_eq(devmm_allocate(lim, 3000, 0, NULL, &a), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(lim, 5000, 0, NULL, &b), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(lim, 1000, 0, NULL, &c), DEVMM_OK);
  devmm_deallocate(lim, c, 1000, 0, NULL);
  ck_assert_int_eq(devmm_allocate(lim, 4096, 64, NULL, &p), DEVMM_ENOMEM);
  ck_assert_ptr_null(p);
  /* the refusing layer's own words first, then the figures */
  ck_assert_error_contains("out of memory: allocating 4096 bytes through "
                           "'limiting(statistics(tracking(test.malloc)))' would exceed its limit "
                           "of 10000 bytes (8000 bytes in use)\n"
                           "  request: 4.00 KiB (4096 bytes) on cpu through "
                           "limiting(statistics(tracking(test.malloc))), alignment 64\n"
                           "  devmm on cpu: 7.81 KiB in use, peak 8.79 KiB (counted by "
                           "statistics(tracking(test.malloc)))\n"
                           "  device: ");
  ck_assert_error_contains("  largest live allocations (tracking(test.malloc): 2 live, 7.81 KiB):\n"
                           "    4.88 KiB at ");
  ck_assert_error_contains("test-core("); /* where: the test's own frame, devmm's skipped */
  devmm_oom_report rep = {sizeof rep};
  ck_assert_int_eq(devmm_last_oom(&rep), DEVMM_OK);
  ck_assert_uint_eq(rep.requested_bytes, 4096);
  ck_assert_uint_eq(rep.alignment, 64);
  ck_assert_int_eq(rep.device.device_type, DEVMM_DEVICE_CPU);
  ck_assert_str_eq(rep.stack, "limiting(statistics(tracking(test.malloc)))");
  ck_assert_str_eq(rep.counted_by, "statistics(tracking(test.malloc))");
  ck_assert_str_eq(rep.tracking, "tracking(test.malloc)");
  ck_assert_int_eq(rep.current_bytes, 8000);
  ck_assert_int_eq(rep.peak_bytes, 9000);
  ck_assert_uint_eq(rep.live_count, 2);
  ck_assert_uint_eq(rep.live_bytes, 8000);
  ck_assert_uint_eq(rep.nlargest, 2);
  ck_assert_ptr_eq(rep.largest[0].ptr, b);
  ck_assert_uint_eq(rep.largest[0].bytes, 5000);
  ck_assert_ptr_eq(rep.largest[1].ptr, a);
  ck_assert_uint_gt(rep.largest[0].thread_id, 0);
  ck_assert_ptr_nonnull(strstr(rep.reason, "would exceed its limit of 10000 bytes"));
  /* the report belongs to that error only */
  devmm_set_error(DEVMM_EINVAL, "something else");
  ck_assert_int_eq(devmm_last_oom(&rep), DEVMM_ENOENT);
  ck_assert_error_contains("not an allocation refused for lack of memory");
  rep.struct_size = 3;
  ck_assert_int_eq(devmm_last_oom(&rep), DEVMM_EINVAL);
  ck_assert_error_contains("set it to sizeof(devmm_oom_report)");
  ck_assert_int_eq(devmm_last_oom(NULL), DEVMM_EINVAL);
  devmm_deallocate(lim, a, 3000, 0, NULL);
  devmm_deallocate(lim, b, 5000, 0, NULL);
  devmm_resource_release(lim);
  devmm_resource_release(st);
  devmm_resource_release(tr);
  devmm_resource_release(up);
}
END_TEST

START_TEST(oom_without_counting_adaptors) {
  testres *ts;
  devmm_resource *up = testres_create(&ts);
  atomic_store(&ts->fail_at, 1);
  void *p;
  ck_assert_int_eq(devmm_allocate(up, 100, 0, NULL, &p), DEVMM_ENOMEM);
  ck_assert_error_contains("\n  request: 100 B (100 bytes) on cpu through test.malloc\n"
                           "  devmm on cpu: not counted (no statistics adaptor in the stack)\n"
                           "  device: free and total memory unknown");
  ck_assert_error_contains("(a tracking adaptor in the stack would list the largest");
  devmm_oom_report rep = {sizeof rep};
  ck_assert_int_eq(devmm_last_oom(&rep), DEVMM_OK);
  ck_assert_int_eq(rep.current_bytes, -1);
  ck_assert_int_eq(rep.peak_bytes, -1);
  ck_assert_int_eq(rep.free_bytes, -1);
  ck_assert_str_eq(rep.counted_by, "");
  ck_assert_uint_eq(rep.nlargest, 0);
  /* an older, shorter struct gets its prefix */
  struct {
    size_t struct_size;
    devmm_device device;
    size_t requested_bytes;
  } old = {sizeof old, {0, 0}, 0};
  ck_assert_int_eq(devmm_last_oom((devmm_oom_report *)&old), DEVMM_OK);
  ck_assert_uint_eq(old.requested_bytes, 100);
  /* a limiting adaptor alone still says what is in use */
  devmm_resource *lim;
  ck_assert_int_eq(devmm_limiting_adaptor_create(up, 50, &lim), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(lim, 100, 0, NULL, &p), DEVMM_ENOMEM);
  ck_assert_error_contains("devmm on cpu: 0 B in use through limiting(test.malloc) (peak unknown");
  devmm_resource_release(lim);
  devmm_resource_release(up);
}
END_TEST

/* Adaptors call their upstream's ops directly: the explanation is built once, at the outermost
 * call, and a success costs nothing (no report is made). */
START_TEST(oom_explained_once_at_the_outermost_call) {
  devmm_resource *up = testres_create(NULL), *lim, *st;
  ck_assert_int_eq(devmm_limiting_adaptor_create(up, 10, &lim), DEVMM_OK);
  ck_assert_int_eq(devmm_statistics_adaptor_create(lim, &st), DEVMM_OK);
  void *p;
  ck_assert_int_eq(devmm_allocate(st, 100, 0, NULL, &p), DEVMM_ENOMEM);
  const char *m = devmm_last_error();
  ck_assert_ptr_null(strstr(strstr(m, "request:") + 1, "request:"));
  devmm_clear_error();
  ck_assert_int_eq(devmm_allocate(st, 5, 0, NULL, &p), DEVMM_OK);
  devmm_oom_report rep = {sizeof rep};
  ck_assert_int_eq(devmm_last_oom(&rep), DEVMM_ENOENT);
  devmm_deallocate(st, p, 5, 0, NULL);
  devmm_resource_release(st);
  devmm_resource_release(lim);
  devmm_resource_release(up);
}
END_TEST

static int cmp_ptr(const void *a, const void *b) {
  uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
  return (x > y) - (x < y);
}

/* The largest live allocations come from every stripe of the tracking adaptor (ADR 29); of
 * equal sizes the lowest addresses, in address order, as one ordered walk gave them. */
START_TEST(oom_largest_ties_by_address) {
  devmm_resource *up = testres_create(NULL), *tr, *lim;
  ck_assert_int_eq(devmm_tracking_adaptor_create(up, 0, &tr), DEVMM_OK);
  ck_assert_int_eq(devmm_limiting_adaptor_create(tr, 20000, &lim), DEVMM_OK);
  enum { N = 12 };
  void *p[N], *big, *q;
  for (int i = 0; i < N; i++)
    ck_assert_int_eq(devmm_allocate(lim, 1000, 0, NULL, &p[i]), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(lim, 3000, 0, NULL, &big), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(lim, 10000, 0, NULL, &q), DEVMM_ENOMEM);
  devmm_oom_report rep = {sizeof rep};
  ck_assert_int_eq(devmm_last_oom(&rep), DEVMM_OK);
  ck_assert_uint_eq(rep.live_count, N + 1);
  ck_assert_uint_eq(rep.nlargest, DEVMM_OOM_LARGEST);
  ck_assert_ptr_eq(rep.largest[0].ptr, big);
  /* no stacks recorded: the report says how to record them, once */
  ck_assert_error_contains("(no stack recorded)");
  ck_assert_error_contains("\n  (no stacks recorded: backtraces = true in devmm.ini, or "
                           "TrackingAdaptor(python_stack=N) in Python, records where each was "
                           "made)");
  qsort(p, N, sizeof p[0], cmp_ptr);
  for (int k = 1; k < DEVMM_OOM_LARGEST; k++) {
    ck_assert_uint_eq(rep.largest[k].bytes, 1000);
    ck_assert_ptr_eq(rep.largest[k].ptr, p[k - 1]);
  }
  for (int i = 0; i < N; i++)
    devmm_deallocate(lim, p[i], 1000, 0, NULL);
  devmm_deallocate(lim, big, 3000, 0, NULL);
  devmm_resource_release(lim);
  devmm_resource_release(tr);
  devmm_resource_release(up);
}
END_TEST

Suite *oom_suite(void) {
  Suite *s = suite_create("oom");
  TCase *tc = tcase_create("oom");
  tcase_add_test(tc, oom_explains_itself);
  tcase_add_test(tc, oom_without_counting_adaptors);
  tcase_add_test(tc, oom_explained_once_at_the_outermost_call);
  tcase_add_test(tc, oom_largest_ties_by_address);
  suite_add_tcase(s, tc);
  return s;
}
