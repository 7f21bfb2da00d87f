/* Suite tracking_history: the tracking adaptor's event history (a ring) and context hooks. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "testres.h"
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
