/* Suite error: status names and texts, the thread-local message (set and cleared by a
 * second thread), long messages truncated safely. */
#include <check.h>
#include <pthread.h>
#include <string.h>

#include "testres.h"

START_TEST(error_names_and_texts) {
  ck_assert_str_eq(devmm_status_name(DEVMM_OK), "DEVMM_OK");
  ck_assert_str_eq(devmm_status_name(DEVMM_ENOMEM), "DEVMM_ENOMEM");
  ck_assert_str_eq(devmm_status_name(12345), "DEVMM_UNKNOWN");
  ck_assert_str_eq(devmm_strerror(DEVMM_ENOMEM), "out of memory");
  ck_assert_str_eq(devmm_strerror(-999), "unknown status");
}
END_TEST

/* A second thread starts with no message, sets its own, and clears it: the first thread's
 * message and status are untouched throughout. */
static void *other_thread_errors(void *arg) {
  (void)arg;
  int ok = devmm_last_status() == DEVMM_OK && devmm_last_error()[0] == '\0';
  devmm_set_error(DEVMM_ENOMEM, "other thread");
  ok &= devmm_last_status() == DEVMM_ENOMEM && strcmp(devmm_last_error(), "other thread") == 0;
  return (void *)(intptr_t)ok;
}

static void *other_thread_clears(void *arg) {
  (void)arg;
  devmm_clear_error();
  return NULL;
}

START_TEST(error_is_thread_local_and_clearable) {
  ck_assert_int_eq(devmm_set_error(DEVMM_EINVAL, "bad %d", 42), DEVMM_EINVAL);
  ck_assert_str_eq(devmm_last_error(), "bad 42");
  ck_assert_int_eq(devmm_last_status(), DEVMM_EINVAL);
  pthread_t t;
  void *ok;
  ck_assert_int_eq(pthread_create(&t, NULL, other_thread_errors, NULL), 0);
  ck_assert_int_eq(pthread_join(t, &ok), 0);
  ck_assert_msg(ok, "the second thread saw this thread's message, or lost its own");
  ck_assert_str_eq(devmm_last_error(), "bad 42"); /* not "other thread" */
  ck_assert_int_eq(devmm_last_status(), DEVMM_EINVAL);
  ck_assert_int_eq(pthread_create(&t, NULL, other_thread_clears, NULL), 0);
  ck_assert_int_eq(pthread_join(t, NULL), 0);
  ck_assert_str_eq(devmm_last_error(), "bad 42"); /* another thread's clear is its own */
  devmm_clear_error();
  ck_assert_str_eq(devmm_last_error(), "");
  ck_assert_int_eq(devmm_last_status(), DEVMM_OK);
}
END_TEST

START_TEST(error_long_message_truncated_safely) {
  char big[2000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = 0;
  devmm_set_error(DEVMM_EIO, "%s", big);
  ck_assert_uint_lt(strlen(devmm_last_error()), 600);
}
END_TEST

Suite *error_suite(void) {
  Suite *s = suite_create("error");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, error_names_and_texts);
  tcase_add_test(tc, error_is_thread_local_and_clearable);
  tcase_add_test(tc, error_long_message_truncated_safely);
  suite_add_tcase(s, tc);
  return s;
}
