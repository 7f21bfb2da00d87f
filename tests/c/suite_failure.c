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

/* An upstream that fails with a device error, not out-of-memory (the any-error flag). */
static int refuse_alloc(void *user, size_t bytes, size_t alignment, devmm_stream stream,
                        void **out) {
  (void)user, (void)bytes, (void)alignment, (void)stream, (void)out;
  return devmm_set_error(DEVMM_EDEVICE, "refuse: the device said no");
}

static int refuse_free(void *user, void *ptr, size_t bytes, size_t alignment, devmm_stream stream) {
  (void)user, (void)ptr, (void)bytes, (void)alignment, (void)stream;
  return DEVMM_OK;
}

static int count_calls(size_t bytes, int attempt, void *user) {
  (void)bytes, (void)attempt;
  ++*(int *)user;
  return 0;
}

static int own_error(size_t bytes, int attempt, void *user) {
  (void)bytes, (void)attempt, (void)user;
  return devmm_set_error(DEVMM_ECALLBACK, "own_error: the callback failed itself");
}

START_TEST(failure_callback_any_error_and_own_error) {
  devmm_resource *up, *fc;
  ck_assert_int_eq(devmm_callback_resource_create(refuse_alloc, refuse_free, NULL, NULL,
                                                  (devmm_device){DEVMM_DEVICE_CPU, 0}, "refuse", 0,
                                                  &up),
                   DEVMM_OK);
  int calls = 0;
  void *p;
  /* by default a device error is not the callback's business */
  ck_assert_int_eq(devmm_failure_callback_adaptor_create(up, count_calls, &calls, &fc), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(fc, 64, 0, NULL, &p), DEVMM_EDEVICE);
  ck_assert_int_eq(calls, 0);
  devmm_resource_release(fc);
  /* DEVMM_FAILURE_CALLBACK_ANY_ERROR: called, and the upstream's error survives */
  ck_assert_int_eq(devmm_failure_callback_adaptor_create_ex(up, count_calls, &calls,
                                                            DEVMM_FAILURE_CALLBACK_ANY_ERROR, &fc),
                   DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(fc, 64, 0, NULL, &p), DEVMM_EDEVICE);
  ck_assert_int_eq(calls, 1);
  ck_assert_error_contains("the device said no");
  ck_assert_error_contains("gave up after 1 attempt");
  devmm_resource_release(fc);
  /* a negative answer is the callback's own error, returned as it set it */
  ck_assert_int_eq(devmm_failure_callback_adaptor_create_ex(up, own_error, NULL,
                                                            DEVMM_FAILURE_CALLBACK_ANY_ERROR, &fc),
                   DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(fc, 64, 0, NULL, &p), DEVMM_ECALLBACK);
  ck_assert_error_contains("own_error: the callback failed itself");
  devmm_resource_release(fc);
  ck_assert_int_eq(devmm_failure_callback_adaptor_create_ex(up, count_calls, NULL, 1u << 5, &fc),
                   DEVMM_EINVAL);
  ck_assert_error_contains("unknown flags 0x20");
  ck_assert_ptr_null(fc);
  devmm_resource_release(up);
}
END_TEST

Suite *failure_suite(void) {
  Suite *s = suite_create("failure");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, failure_callback_retries);
  tcase_add_test(tc, failure_callback_any_error_and_own_error);
  suite_add_tcase(s, tc);
  return s;
}
