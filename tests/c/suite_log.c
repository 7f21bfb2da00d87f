/* Suite log: the memory log (include/devmm/memlog.h) read back and paired: reused addresses across
 * threads, times and formats, every malformed field named, what the logging adaptor wrote. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testres.h"
#define HDR "Thread,Time,Action,Pointer,Size,Stream\n"

static devmm_log *parse_ok(const char *text) {
  devmm_log *log = NULL;
  int rc = devmm_log_parse(text, strlen(text), "t.csv", &log);
  ck_assert_msg(rc == DEVMM_OK, "parse failed: %s", devmm_last_error());
  return log;
}

static void parse_fails(const char *text, const char *needle) {
  devmm_log *log = (devmm_log *)1;
  ck_assert_int_eq(devmm_log_parse(text, strlen(text), "t.csv", &log), DEVMM_EINVAL);
  ck_assert_ptr_null(log);
  ck_assert_error_contains(needle);
}

START_TEST(log_pairs_frees_with_allocations) {
  devmm_log *log = parse_ok(HDR "7,10:00:00:000001,allocate,0x1000,100,(nil)\n"
                                "9,10:00:00:000002,allocate,0x2000,50,0x5\n"
                                "7,10:00:00:000003,free,0x1000,100,(nil)\n"
                                "9,10:00:00:000004,allocate failure,(nil),1000000,(nil)\n");
  ck_assert_uint_eq(log->nevents, 4);
  ck_assert_uint_eq(log->nthreads, 2);
  ck_assert_uint_eq(log->threads[0], 7);
  ck_assert_uint_eq(log->threads[1], 9);
  const devmm_log_event *e = log->events;
  ck_assert_uint_eq(e[0].action, DEVMM_LOG_ALLOCATE);
  ck_assert_uint_eq(e[0].ptr, 0x1000);
  ck_assert_uint_eq(e[0].bytes, 100);
  ck_assert_int_eq(e[0].peer, 2);
  ck_assert_int_eq(e[2].peer, 0);
  ck_assert_int_eq(e[1].peer, -1); /* never freed */
  ck_assert_uint_eq(e[1].stream, 5);
  ck_assert_uint_eq(e[1].thread, 1);
  ck_assert_uint_eq(e[3].action, DEVMM_LOG_ALLOCATE_FAILURE);
  ck_assert_int_eq(e[3].peer, -1);
  ck_assert_uint_eq(e[0].time_ns, 36000ull * 1000000000ull + 1000);
  ck_assert_uint_eq(e[3].time_ns - e[0].time_ns, 3000);
  ck_assert_uint_eq(log->never_freed, 1);
  ck_assert_uint_eq(log->unmatched_frees, 0);
  devmm_log_free(log);
}
END_TEST

/* Two threads: B's allocation of a reused address is logged before A's free of the old one
 * (each line is written after its operation returned). The free belongs to the oldest. */
START_TEST(log_reused_pointer_out_of_order) {
  devmm_log *log = parse_ok(HDR "1,10:00:00:000001,allocate,0xa0,64,(nil)\n"
                                "2,10:00:00:000003,allocate,0xa0,128,(nil)\n"
                                "1,10:00:00:000002,free,0xa0,64,(nil)\n"
                                "2,10:00:00:000004,free,0xa0,128,(nil)\n"
                                "1,10:00:00:000005,allocate,0xa0,32,(nil)\n"
                                "1,10:00:00:000006,free,0xa0,32,(nil)\n"
                                "1,10:00:00:000007,free,0xb0,8,(nil)\n");
  const devmm_log_event *e = log->events;
  ck_assert_int_eq(e[2].peer, 0);
  ck_assert_int_eq(e[0].peer, 2);
  ck_assert_int_eq(e[3].peer, 1);
  ck_assert_int_eq(e[1].peer, 3);
  ck_assert_int_eq(e[5].peer, 4);
  ck_assert_int_eq(e[6].peer, -1); /* allocated before the log began */
  ck_assert_uint_eq(log->unmatched_frees, 1);
  ck_assert_uint_eq(log->never_freed, 0);
  devmm_log_free(log);
}
END_TEST

START_TEST(log_times_and_formats) {
  /* RMM's fraction with a dot, CRLF line ends, a midnight wrap, a free that failed */
  devmm_log *log = parse_ok("Thread,Time,Action,Pointer,Size,Stream\r\n"
                            "140211,23:59:59.5,allocate,0xFF00,1,0x0\r\n"
                            "140211,00:00:00.25,free failure,0xff00,1,0x0\r\n"
                            "\r\n"
                            "140211,00:00:01.000000001,free,0xff00,1,0x0\r\n");
  const devmm_log_event *e = log->events;
  ck_assert_uint_eq(log->nevents, 3);
  ck_assert_uint_eq(e[1].time_ns - e[0].time_ns, 750000000ull);
  ck_assert_uint_eq(e[2].time_ns - e[0].time_ns, 1500000001ull);
  ck_assert_uint_eq(e[1].action, DEVMM_LOG_FREE_FAILURE);
  ck_assert_int_eq(e[1].peer, -1);
  ck_assert_int_eq(e[0].peer, 2); /* the failed free left it open */
  devmm_log_free(log);
}
END_TEST

/* Every jump back of more than 12 hours is a midnight; 213504 of them (two lines a day, 23:00
 * then 00:00) would take the times past 64 bits of nanoseconds. The line where that happens is
 * refused, instead of the times wrapping around to the start. */
START_TEST(log_times_cannot_wrap) {
  const char day[] = "1,23:00:00,free,0x1,0,0\n1,00:00:00,free,0x1,0,0\n";
  size_t days = 214000, n = strlen(HDR) + days * (sizeof day - 1);
  char *text = malloc(n + 1), *w = text;
  ck_assert_ptr_nonnull(text);
  w += sprintf(w, "%s", HDR);
  for (size_t i = 0; i < days; i++)
    w += sprintf(w, "%s", day);
  devmm_log *log = NULL;
  int rc = devmm_log_parse(text, n, "t.csv", &log);
  if (rc == DEVMM_OK) {
    for (size_t i = 1; i < log->nevents; i++)
      ck_assert_msg(log->events[i].time_ns >= log->events[i - 1].time_ns,
                    "event %zu (line %zu) is at %llu ns, before event %zu at %llu ns", i, i + 2,
                    (unsigned long long)log->events[i].time_ns, i - 1,
                    (unsigned long long)log->events[i - 1].time_ns);
    devmm_log_free(log);
  }
  free(text);
  ck_assert_int_eq(rc, DEVMM_EINVAL);
  ck_assert_str_eq(devmm_last_error(),
                   "t.csv:427009: Time '00:00:00' is on day 213504 of the log, past what 64 bits "
                   "of nanoseconds can count (each jump back of more than 12 hours is a "
                   "midnight): expected a log of fewer days");
}
END_TEST

START_TEST(log_bad_input_is_named) {
  parse_fails("", "empty: expected the header");
  parse_fails("Thread,Time\n", "t.csv:1: 'Thread,Time' is not the log's header");
  parse_fails(HDR "1,10:00:00:000001,allocate,0x10,8\n",
              "t.csv:2: 5 fields: expected 6 (Thread,Time,Action,Pointer,Size,Stream)");
  parse_fails(HDR "1,10:00:00:000001,allocate,0x10,8,(nil),x\n", "t.csv:2: more than 6 fields");
  parse_fails(HDR "x,10:00:00:000001,allocate,0x10,8,(nil)\n",
              "t.csv:2: Thread 'x' is not a thread id");
  parse_fails(HDR "1,25:00:00:000001,allocate,0x10,8,(nil)\n",
              "t.csv:2: Time '25:00:00:000001' is not a time of day: expected HH:MM:SS:micro");
  parse_fails(HDR "1,10:00:00:0000011234,allocate,0x10,8,(nil)\n", "t.csv:2: Time");
  parse_fails(HDR "1,10:00:00:000001,alloc,0x10,8,(nil)\n",
              "t.csv:2: Action 'alloc' is unknown: expected allocate, free, allocate failure "
              "or free failure");
  parse_fails(HDR "1,10:00:00:000001,allocate,0xZZ,8,(nil)\n",
              "t.csv:2: Pointer '0xZZ' is not an address");
  parse_fails(HDR "1,10:00:00:000001,allocate,0x10,-8,(nil)\n",
              "t.csv:2: Size '-8' is not a number of bytes");
  parse_fails(HDR "1,10:00:00:000001,allocate,0x10,99999999999999999999999,(nil)\n",
              "t.csv:2: Size '99999999999999999999999' is too large: expected at most "
              "18446744073709551615");
  parse_fails(HDR "1,10:00:00:000001,allocate,0x10,18446744073709551616,(nil)\n",
              "t.csv:2: Size '18446744073709551616' is too large");
  parse_fails(HDR "123456789012345678901,10:00:00:000001,allocate,0x10,8,(nil)\n",
              "t.csv:2: Thread '123456789012345678901' is too large");
  parse_fails(HDR "1,10:00:00:000001,allocate,0x10,8,stream\n", "t.csv:2: Stream 'stream'");
  parse_fails(HDR "1,10:00:00:000001,allocate,(nil),8,(nil)\n",
              "t.csv:2: allocate of a NULL pointer");
  parse_fails(HDR HDR, "t.csv:2: Thread 'Thread' is not a thread id");
  const char nul[] = HDR "1,10:00:00:000001,allocate,0x1\0,8,(nil)\n";
  devmm_log *log;
  ck_assert_int_eq(devmm_log_parse(nul, sizeof nul - 1, "t.csv", &log), DEVMM_EINVAL);
  ck_assert_error_contains("t.csv:2: a NUL byte");
  ck_assert_int_eq(devmm_log_parse(HDR, strlen(HDR), "t.csv", NULL), DEVMM_EINVAL);
  ck_assert_error_contains("out is NULL");
  ck_assert_int_eq(devmm_log_read("/nonexistent-devmm/log.csv", &log), DEVMM_EIO);
  ck_assert_error_contains("cannot open log '/nonexistent-devmm/log.csv'");
  ck_assert_ptr_null(log);
  devmm_log_free(NULL);
}
END_TEST

START_TEST(log_reads_what_the_logging_adaptor_wrote) {
  const char *tmp = getenv("TMPDIR");
  char buf[4096];
  snprintf(buf, sizeof buf, "%s/devmm-log-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  int fd = mkstemp(buf);
  ck_assert_int_ge(fd, 0);
  close(fd);
  devmm_resource *up = testres_create(NULL), *lg;
  ck_assert_int_eq(devmm_logging_adaptor_create(up, buf, 1, &lg), DEVMM_OK);
  void *p[100];
  for (int i = 0; i < 100; i++)
    ck_assert_int_eq(devmm_allocate(lg, (size_t)(i + 1) * 8, 0, NULL, &p[i]), DEVMM_OK);
  for (int i = 0; i < 100; i += 2)
    devmm_deallocate(lg, p[i], (size_t)(i + 1) * 8, 0, NULL);
  devmm_resource_release(lg);
  devmm_log *log;
  ck_assert_int_eq(devmm_log_read(buf, &log), DEVMM_OK);
  ck_assert_uint_eq(log->nevents, 150);
  ck_assert_uint_eq(log->never_freed, 50);
  for (int i = 0; i < 100; i++) {
    ck_assert_uint_eq(log->events[i].ptr, (uintptr_t)p[i]);
    ck_assert_uint_eq(log->events[i].bytes, (size_t)(i + 1) * 8);
    ck_assert_int_eq(log->events[i].peer, i % 2 == 0 ? 100 + i / 2 : -1);
  }
  devmm_log_free(log);
  for (int i = 1; i < 100; i += 2)
    devmm_deallocate(up, p[i], (size_t)(i + 1) * 8, 0, NULL);
  devmm_resource_release(up);
  unlink(buf);
}
END_TEST

/* A FIFO where a log is expected (another user can plant one) would block the reader forever:
 * refused at once, as a FIFO; a directory is named too. alarm() turns a hang into a failure. */
START_TEST(log_read_refuses_what_is_not_a_file) {
  char dir[TESTRES_PATH_MAX], fifo[TESTRES_PATH_MAX + 16], want[2 * TESTRES_PATH_MAX];
  testres_mkdtemp(dir, sizeof dir, "logfifo");
  snprintf(fifo, sizeof fifo, "%s/job.csv", dir);
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  devmm_log *log = (devmm_log *)1;
  alarm(10);
  ck_assert_int_eq(devmm_log_read(fifo, &log), DEVMM_EIO);
  alarm(0);
  ck_assert_ptr_null(log);
  snprintf(want, sizeof want, "cannot read log '%s': it is a FIFO: expected a regular file", fifo);
  ck_assert_str_eq(devmm_last_error(), want);
  ck_assert_int_eq(devmm_log_read(dir, &log), DEVMM_EIO);
  snprintf(want, sizeof want, "cannot read log '%s': it is a directory: expected a regular file",
           dir);
  ck_assert_str_eq(devmm_last_error(), want);
  unlink(fifo);
  rmdir(dir);
}
END_TEST

/* A field's text goes into the refusal escaped: a CR, an ESC or a BEL from the log would let it
 * forge a line on the terminal that shows the message. */
START_TEST(log_fields_escaped_in_messages) {
  parse_fails(HDR "1,12:00:00.000001,allocate,0x1000,16,0x0\r[devmm] OK\x1b[K\a\n",
              "t.csv:2: Stream '0x0\\x0d[devmm] OK\\x1b[K\\x07' is not a stream");
  parse_fails(HDR "1\x1b]0;x\a,10:00:00:000001,allocate,0x10,8,(nil)\n",
              "t.csv:2: Thread '1\\x1b]0;x\\x07' is not a thread id");
  parse_fails(HDR "1,10:00\x1b:00,allocate,0x10,8,(nil)\n",
              "t.csv:2: Time '10:00\\x1b:00' is not a time of day");
  parse_fails(HDR "1,10:00:00:000001,free\x1b,0x10,8,(nil)\n",
              "t.csv:2: Action 'free\\x1b' is unknown");
  parse_fails("Thread,Time\x1b[2J\n", "t.csv:1: 'Thread,Time\\x1b[2J' is not the log's header");
  parse_fails(HDR "1,10:00:00:000001,allocate,0x10,8\\,(nil)\n",
              "t.csv:2: Size '8\\x5c' is not a number of bytes");
}
END_TEST

Suite *log_suite(void) {
  Suite *s = suite_create("log");
  TCase *tc = tcase_create("log");
  tcase_add_test(tc, log_pairs_frees_with_allocations);
  tcase_add_test(tc, log_reused_pointer_out_of_order);
  tcase_add_test(tc, log_times_and_formats);
  tcase_add_test(tc, log_times_cannot_wrap);
  tcase_add_test(tc, log_bad_input_is_named);
  tcase_add_test(tc, log_reads_what_the_logging_adaptor_wrote);
  tcase_add_test(tc, log_read_refuses_what_is_not_a_file);
  tcase_add_test(tc, log_fields_escaped_in_messages);
  suite_add_tcase(s, tc);
  return s;
}
