/* Suite failure: the failure-callback adaptor retries as its callback says. */
#include <check.h>

#include "testres.h"

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
