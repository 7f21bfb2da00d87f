/* Suite logging: the logging adaptor's CSV, flush failures, stderr. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "testres.h"

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
