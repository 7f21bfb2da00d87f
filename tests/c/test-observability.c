/* Suites: log (the memory log read back and paired), oom (out-of-memory explanations),
 * tracking_history (the tracking adaptor's event history and context hooks). */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testres.h"

/* ================================================================ log */

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
              "t.csv:2: Size");
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

Suite *log_suite(void) {
  Suite *s = suite_create("log");
  TCase *tc = tcase_create("log");
  tcase_add_test(tc, log_pairs_frees_with_allocations);
  tcase_add_test(tc, log_reused_pointer_out_of_order);
  tcase_add_test(tc, log_times_and_formats);
  tcase_add_test(tc, log_bad_input_is_named);
  tcase_add_test(tc, log_reads_what_the_logging_adaptor_wrote);
  suite_add_tcase(s, tc);
  return s;
}

/* ================================================================ oom */

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

/* ================================================================ tracking_history */

typedef struct {
  int captures, releases, describes;
  size_t last_bytes;
} hooks;

static uint64_t cap_hook(void *user, size_t bytes) {
  hooks *h = user;
  h->last_bytes = bytes;
  return (uint64_t)++h->captures * 10;
}

static size_t describe_hook(void *user, uint64_t tag, char *buf, size_t cap) {
  hooks *h = user;
  h->describes++;
  return (size_t)snprintf(buf, cap, "site%llu.py:%llu in f\ncaller.py:1 in <module>",
                          (unsigned long long)tag, (unsigned long long)tag);
}

static void release_hook(void *user) { ((hooks *)user)->releases++; }

START_TEST(tracking_history_ring) {
  devmm_resource *up = testres_create(NULL), *tr;
  devmm_tracking_options o = {sizeof o, 0, 4, NULL, NULL, NULL, NULL};
  ck_assert_int_eq(devmm_tracking_adaptor_create_ex(up, &o, &tr), DEVMM_OK);
  devmm_tracking_event ev[8];
  size_t n, stored;
  uint64_t dropped, now;
  ck_assert_int_eq(devmm_tracking_history(tr, ev, 8, &n, &stored, &dropped, &now), DEVMM_OK);
  ck_assert_uint_eq(n, 0);
  void *a, *b, *c;
  devmm_allocate(tr, 10, 0, NULL, &a);
  devmm_allocate(tr, 20, 0, NULL, &b);
  devmm_deallocate(tr, a, 10, 0, NULL);
  ck_assert_int_eq(devmm_tracking_history(tr, ev, 8, &n, &stored, &dropped, &now), DEVMM_OK);
  ck_assert_uint_eq(n, 3);
  ck_assert_uint_eq(dropped, 0);
  ck_assert_uint_eq(ev[0].action, DEVMM_LOG_ALLOCATE);
  ck_assert_ptr_eq(ev[0].ptr, a);
  ck_assert_uint_eq(ev[0].bytes, 10);
  ck_assert_uint_eq(ev[1].bytes, 20);
  ck_assert_uint_eq(ev[2].action, DEVMM_LOG_FREE);
  ck_assert_ptr_eq(ev[2].ptr, a);
  ck_assert_uint_le(ev[0].time_ns, ev[2].time_ns);
  ck_assert_uint_le(ev[2].time_ns, now);
  ck_assert_uint_gt(ev[0].thread_id, 0);
  /* live allocations carry their time and thread */
  devmm_allocation_info info;
  ck_assert_int_eq(devmm_tracking_lookup(tr, b, &info), DEVMM_OK);
  ck_assert_uint_eq(info.time_ns, ev[1].time_ns);
  ck_assert_uint_eq(info.thread_id, ev[1].thread_id);
  ck_assert_int_eq(info.nframes, 0);
  /* the ring keeps the last 4 */
  devmm_allocate(tr, 30, 0, NULL, &c);
  devmm_deallocate(tr, c, 30, 0, NULL);
  devmm_deallocate(tr, b, 20, 0, NULL);
  ck_assert_int_eq(devmm_tracking_history(tr, ev, 2, &n, &stored, &dropped, NULL), DEVMM_OK);
  ck_assert_uint_eq(n, 2);
  ck_assert_uint_eq(stored, 4);
  ck_assert_uint_eq(dropped, 2);
  ck_assert_uint_eq(ev[0].action, DEVMM_LOG_FREE); /* the oldest kept: a's free */
  ck_assert_uint_eq(ev[0].bytes, 10);
  ck_assert_uint_eq(ev[1].bytes, 30);
  ck_assert_int_eq(devmm_tracking_history(tr, NULL, 0, &n, NULL, NULL, NULL), DEVMM_OK);
  ck_assert_uint_eq(n, 0);
  ck_assert_int_eq(devmm_tracking_history(tr, NULL, 5, &n, NULL, NULL, NULL), DEVMM_EINVAL);
  ck_assert_error_contains("out is NULL");
  devmm_resource_release(tr);
  /* without history */
  ck_assert_int_eq(devmm_tracking_adaptor_create(up, 0, &tr), DEVMM_OK);
  ck_assert_int_eq(devmm_tracking_history(tr, ev, 8, &n, NULL, NULL, NULL), DEVMM_ENOTSUP);
  ck_assert_error_contains("keeps no history (create it with options.history > 0)");
  ck_assert_int_eq(devmm_tracking_history(up, ev, 8, &n, NULL, NULL, NULL), DEVMM_EINVAL);
  ck_assert_error_contains("is not a tracking adaptor");
  devmm_resource_release(tr);
  devmm_resource_release(up);
}
END_TEST

START_TEST(tracking_context_hooks) {
  hooks h = {0};
  devmm_resource *up = testres_create(NULL), *tr;
  devmm_tracking_options o = {sizeof o, 0, 16, cap_hook, describe_hook, release_hook, &h};
  ck_assert_int_eq(devmm_tracking_adaptor_create_ex(up, &o, &tr), DEVMM_OK);
  void *a, *b;
  devmm_allocate(tr, 64, 0, NULL, &a);
  devmm_allocate(tr, 32, 0, NULL, &b);
  ck_assert_int_eq(h.captures, 2);
  ck_assert_uint_eq(h.last_bytes, 32);
  devmm_allocation_info info;
  ck_assert_int_eq(devmm_tracking_lookup(tr, a, &info), DEVMM_OK);
  ck_assert_uint_eq(info.tag, 10);
  char text[128];
  ck_assert_int_eq(devmm_tracking_describe(tr, 20, text, sizeof text), DEVMM_OK);
  ck_assert_str_eq(text, "site20.py:20 in f\ncaller.py:1 in <module>");
  ck_assert_int_eq(devmm_tracking_describe(tr, 0, text, sizeof text), DEVMM_OK);
  ck_assert_str_eq(text, "");
  ck_assert_int_eq(devmm_tracking_describe(tr, 20, text, 0), DEVMM_EINVAL);
  char *report;
  ck_assert_int_eq(devmm_tracking_report(tr, &report), DEVMM_OK);
  ck_assert_ptr_nonnull(strstr(report, "64 bytes  stream (nil)  thread "));
  ck_assert_ptr_nonnull(strstr(report, "\n    site10.py:10 in f\n    caller.py:1 in <module>\n"));
  ck_assert_ptr_nonnull(strstr(report, "\n    site20.py:20 in f\n"));
  devmm_string_free(report);
  /* a free event carries the allocation's tag */
  devmm_deallocate(tr, a, 64, 0, NULL);
  devmm_tracking_event ev[4];
  size_t n;
  ck_assert_int_eq(devmm_tracking_history(tr, ev, 4, &n, NULL, NULL, NULL), DEVMM_OK);
  ck_assert_uint_eq(n, 3);
  ck_assert_uint_eq(ev[2].tag, 10);
  /* the out-of-memory explanation names where the largest came from */
  devmm_resource *lim;
  ck_assert_int_eq(devmm_limiting_adaptor_create(tr, 40, &lim), DEVMM_OK);
  void *p;
  ck_assert_int_eq(devmm_allocate(lim, 100, 0, NULL, &p), DEVMM_ENOMEM);
  ck_assert_int_eq(h.captures, 2); /* a refused allocation is not captured */
  ck_assert_error_contains("largest live allocations (tracking(test.malloc): 1 live, 32 B):\n"
                           "    32 B at ");
  ck_assert_error_contains("  site20.py:20 in f");
  devmm_resource_release(lim);
  devmm_deallocate(tr, b, 32, 0, NULL);
  ck_assert_int_eq(h.releases, 0);
  devmm_resource_release(tr);
  ck_assert_int_eq(h.releases, 1);
  devmm_resource_release(up);
}
END_TEST

START_TEST(tracking_options_checked) {
  devmm_resource *up = testres_create(NULL), *tr = (devmm_resource *)1;
  devmm_tracking_options o = {3, 0, 0, NULL, NULL, NULL, NULL};
  ck_assert_int_eq(devmm_tracking_adaptor_create_ex(up, &o, &tr), DEVMM_EINVAL);
  ck_assert_error_contains("options.struct_size 3 is not a devmm_tracking_options size");
  ck_assert_ptr_null(tr);
  devmm_tracking_options d = {sizeof d, 0, 0, NULL, describe_hook, NULL, NULL};
  ck_assert_int_eq(devmm_tracking_adaptor_create_ex(up, &d, &tr), DEVMM_EINVAL);
  ck_assert_error_contains("without a capture hook");
  devmm_tracking_options big = {sizeof big, 0, (size_t)1 << 40, NULL, NULL, NULL, NULL};
  ck_assert_int_eq(devmm_tracking_adaptor_create_ex(up, &big, &tr), DEVMM_EINVAL);
  ck_assert_error_contains("history of 1099511627776 events: at most 2^32");
  ck_assert_int_eq(devmm_tracking_adaptor_create_ex(NULL, NULL, &tr), DEVMM_EINVAL);
  ck_assert_int_eq(devmm_tracking_adaptor_create_ex(up, NULL, &tr), DEVMM_OK);
  ck_assert_str_eq(devmm_resource_name(tr), "tracking(test.malloc)");
  devmm_resource_release(tr);
  char buf[256];
  ck_assert_int_eq(devmm_frame_describe((void *)&devmm_allocate, buf, sizeof buf), DEVMM_OK);
  ck_assert_msg(strstr(buf, "libdevmm.so") && strstr(buf, "(devmm_allocate+0x0)"), "got %s", buf);
  ck_assert_int_eq(devmm_frame_describe(NULL, buf, sizeof buf), DEVMM_OK);
  ck_assert_int_eq(devmm_frame_describe(NULL, buf, 0), DEVMM_EINVAL);
  devmm_resource_release(up);
}
END_TEST

/* Last in the suite: devmm_callbacks_disable is for good (a front end's exit). */
START_TEST(tracking_hooks_not_called_after_callbacks_disabled) {
  hooks h = {0};
  devmm_resource *up = testres_create(NULL), *tr;
  devmm_tracking_options o = {sizeof o, 0, 0, cap_hook, describe_hook, release_hook, &h};
  ck_assert_int_eq(devmm_tracking_adaptor_create_ex(up, &o, &tr), DEVMM_OK);
  devmm_callbacks_disable();
  void *a;
  ck_assert_int_eq(devmm_allocate(tr, 8, 0, NULL, &a), DEVMM_OK);
  ck_assert_int_eq(h.captures, 0);
  char *report;
  ck_assert_int_eq(devmm_tracking_report(tr, &report), DEVMM_OK);
  devmm_string_free(report);
  ck_assert_int_eq(h.describes, 0);
  devmm_deallocate(tr, a, 8, 0, NULL);
  devmm_resource_release(tr);
  ck_assert_int_eq(h.releases, 0);
  devmm_resource_release(up);
}
END_TEST

Suite *tracking_history_suite(void) {
  Suite *s = suite_create("tracking_history");
  TCase *tc = tcase_create("tracking_history");
  tcase_add_test(tc, tracking_history_ring);
  tcase_add_test(tc, tracking_context_hooks);
  tcase_add_test(tc, tracking_options_checked);
  tcase_add_test(tc, tracking_hooks_not_called_after_callbacks_disabled);
  suite_add_tcase(s, tc);
  return s;
}
