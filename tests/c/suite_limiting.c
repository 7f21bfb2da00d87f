/* Suite limiting: the limiting adaptor: the limit exactly, refusals over it, failed frees and
 * upstream failures keep the count, the sharded credit stays exact. */
#include <check.h>

#include "testres.h"

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
