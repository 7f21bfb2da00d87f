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

/* A new log file is created 0600 (whatever the umask lets through of more); a file of this
 * user's that exists is truncated and keeps its mode, as fopen's "w" did. */
START_TEST(logging_file_created_0600) {
  char dir[TESTRES_PATH_MAX], path[TESTRES_PATH_MAX + 16];
  testres_mkdtemp(dir, sizeof dir, "logmode");
  snprintf(path, sizeof path, "%s/new.csv", dir);
  mode_t old = umask(022);
  devmm_resource *up = testres_create(NULL), *lg;
  ck_assert_int_eq(devmm_logging_adaptor_create(up, path, 0, &lg), DEVMM_OK);
  devmm_resource_release(lg);
  umask(old);
  struct stat st;
  ck_assert_int_eq(stat(path, &st), 0);
  ck_assert_msg((st.st_mode & 07777) == 0600, "a new log file has mode %04o, expected 0600",
                (unsigned)(st.st_mode & 07777));
  testres_write_text(path, "an old log\n");
  ck_assert_int_eq(chmod(path, 0640), 0);
  ck_assert_int_eq(devmm_logging_adaptor_create(up, path, 0, &lg), DEVMM_OK);
  devmm_resource_release(lg);
  char *text = testres_read_text(path);
  ck_assert_str_eq(text, "Thread,Time,Action,Pointer,Size,Stream\n");
  free(text);
  ck_assert_int_eq(stat(path, &st), 0);
  ck_assert_int_eq(st.st_mode & 07777, 0640);
  unlink(path);
  rmdir(dir);
  devmm_resource_release(up);
}
END_TEST

/* A log file named through a symbolic link is refused, dangling or not: whoever can write the
 * link's directory could point it at any file of this user's, which would be truncated. A file
 * with a second name (a hard link) is refused too; the file pointed at is left as it was. */
START_TEST(logging_file_links_refused) {
  char dir[TESTRES_PATH_MAX], target[TESTRES_PATH_MAX + 16], link_path[TESTRES_PATH_MAX + 16];
  char want[3 * TESTRES_PATH_MAX];
  testres_mkdtemp(dir, sizeof dir, "loglink");
  snprintf(target, sizeof target, "%s/precious", dir);
  snprintf(link_path, sizeof link_path, "%s/log.csv", dir);
  testres_write_text(target, "precious\n");
  ck_assert_int_eq(chmod(target, 0600), 0);
  ck_assert_int_eq(symlink(target, link_path), 0);
  devmm_resource *up = testres_create(NULL), *lg = NULL;
  int rc = devmm_logging_adaptor_create(up, link_path, 0, &lg);
  if (rc == DEVMM_OK)
    devmm_resource_release(lg);
  char *text = testres_read_text(target);
  ck_assert_msg(strcmp(text, "precious\n") == 0, "the link's target now holds '%s'", text);
  free(text);
  ck_assert_int_eq(rc, DEVMM_EIO);
  snprintf(want, sizeof want,
           "logging adaptor: refusing log file '%s': it is a symbolic link, which devmm does "
           "not follow: name the file itself",
           link_path);
  ck_assert_str_eq(devmm_last_error(), want);
  ck_assert_ptr_null(lg);
  /* dangling: nothing is created where it points */
  ck_assert_int_eq(unlink(link_path), 0);
  char missing[TESTRES_PATH_MAX + 16];
  snprintf(missing, sizeof missing, "%s/missing", dir);
  ck_assert_int_eq(symlink(missing, link_path), 0);
  ck_assert_int_eq(devmm_logging_adaptor_create(up, link_path, 0, &lg), DEVMM_EIO);
  ck_assert_str_eq(devmm_last_error(), want);
  ck_assert_int_eq(access(missing, F_OK), -1);
  ck_assert_int_eq(unlink(link_path), 0);
  /* a hard link */
  ck_assert_int_eq(link(target, link_path), 0);
  ck_assert_int_eq(devmm_logging_adaptor_create(up, link_path, 0, &lg), DEVMM_EIO);
  snprintf(want, sizeof want,
           "logging adaptor: refusing log file '%s': it has 2 names (hard links): expected a "
           "file with one name",
           link_path);
  ck_assert_str_eq(devmm_last_error(), want);
  text = testres_read_text(target);
  ck_assert_str_eq(text, "precious\n");
  free(text);
  unlink(link_path);
  unlink(target);
  rmdir(dir);
  devmm_resource_release(up);
}
END_TEST

/* A FIFO is refused without waiting for a reader (opening one for writing blocks until a reader
 * comes), and so is a directory; a character device (/dev/null) is fine. */
START_TEST(logging_file_not_regular_refused) {
  char dir[TESTRES_PATH_MAX], fifo[TESTRES_PATH_MAX + 16], want[2 * TESTRES_PATH_MAX];
  testres_mkdtemp(dir, sizeof dir, "logfifo");
  snprintf(fifo, sizeof fifo, "%s/fifo", dir);
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  devmm_resource *up = testres_create(NULL), *lg;
  alarm(10); /* a blocking open would hang: fail instead */
  ck_assert_int_eq(devmm_logging_adaptor_create(up, fifo, 0, &lg), DEVMM_EIO);
  alarm(0);
  snprintf(want, sizeof want,
           "logging adaptor: refusing log file '%s': it is a FIFO: expected a regular file of "
           "this user's or a character device such as /dev/null",
           fifo);
  ck_assert_str_eq(devmm_last_error(), want);
  ck_assert_int_eq(devmm_logging_adaptor_create(up, dir, 0, &lg), DEVMM_EIO);
  snprintf(want, sizeof want,
           "logging adaptor: refusing log file '%s': it is a directory: expected a regular "
           "file of this user's or a character device such as /dev/null",
           dir);
  ck_assert_str_eq(devmm_last_error(), want);
  ck_assert_int_eq(devmm_logging_adaptor_create(up, "/dev/null", 0, &lg), DEVMM_OK);
  devmm_resource_release(lg);
  unlink(fifo);
  rmdir(dir);
  devmm_resource_release(up);
}
END_TEST

/* Two adaptors of one process on one log file (one log_file for [device sim:*]) share it: the
 * second does not truncate what the first wrote, the header is written once, and the file
 * closes with the last of them. */
START_TEST(logging_file_shared_in_process) {
  char dir[TESTRES_PATH_MAX], path[TESTRES_PATH_MAX + 16];
  testres_mkdtemp(dir, sizeof dir, "logshare");
  snprintf(path, sizeof path, "%s/run.csv", dir);
  devmm_resource *up = testres_create(NULL), *a, *b;
  void *p, *q;
  ck_assert_int_eq(devmm_logging_adaptor_create(up, path, 1, &a), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(a, 111, 0, NULL, &p), DEVMM_OK);
  ck_assert_int_eq(devmm_logging_adaptor_create(up, path, 1, &b), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(b, 222, 0, NULL, &q), DEVMM_OK);
  ck_assert_int_eq(devmm_deallocate(a, p, 111, 0, NULL), DEVMM_OK);
  devmm_resource_release(a);
  ck_assert_int_eq(devmm_deallocate(b, q, 222, 0, NULL), DEVMM_OK);
  devmm_resource_release(b);
  char *text = testres_read_text(path);
  const char *header = "Thread,Time,Action,Pointer,Size,Stream\n";
  ck_assert_msg(strncmp(text, header, strlen(header)) == 0 && !strstr(text + 1, "Thread,"),
                "expected one header first:\n%s", text);
  ck_assert_msg(strstr(text, ",allocate,") && strstr(text, ",111,") && strstr(text, ",222,"),
                "the first adaptor's lines are lost:\n%s", text);
  int lines = 0;
  for (const char *c = text; *c; c++)
    lines += *c == '\n';
  ck_assert_int_eq(lines, 5);
  free(text);
  /* once both are gone, a new adaptor starts the file afresh */
  ck_assert_int_eq(devmm_logging_adaptor_create(up, path, 0, &a), DEVMM_OK);
  devmm_resource_release(a);
  text = testres_read_text(path);
  ck_assert_str_eq(text, header);
  free(text);
  unlink(path);
  rmdir(dir);
  devmm_resource_release(up);
}
END_TEST

Suite *logging_suite(void) {
  Suite *s = suite_create("logging");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, logging_csv);
  tcase_add_test(tc, logging_flush_failures_and_stderr);
  tcase_add_test(tc, logging_file_created_0600);
  tcase_add_test(tc, logging_file_links_refused);
  tcase_add_test(tc, logging_file_not_regular_refused);
  tcase_add_test(tc, logging_file_shared_in_process);
  suite_add_tcase(s, tc);
  return s;
}
