/* Suite adaptors: every adaptor forwards the optional ops (mem_info, copy, memset, stream_wait,
 * synchronize) to its upstream, a recording resource (support/recorder.h); the limiting
 * adaptor answers mem_info itself. */
#include <check.h>

#include "recorder.h"
#include "testres.h"

static int make_failure(devmm_resource *up, devmm_resource **out);
static int make_logging(devmm_resource *up, devmm_resource **out) {
  return devmm_logging_adaptor_create(up, "/dev/null", 0, out);
}
static int make_aligned(devmm_resource *up, devmm_resource **out) {
  return devmm_aligned_adaptor_create(up, 64, 0, out);
}
static int make_tracking(devmm_resource *up, devmm_resource **out) {
  return devmm_tracking_adaptor_create(up, 0, out);
}
static int make_sharded(devmm_resource *up, devmm_resource **out) {
  return devmm_statistics_adaptor_create_ex(up, DEVMM_STATISTICS_SHARDED, out);
}
static int refuse_retry(size_t b, int a, void *u) {
  (void)b, (void)a, (void)u;
  return 0;
}
static int make_failure(devmm_resource *up, devmm_resource **out) {
  return devmm_failure_callback_adaptor_create(up, refuse_retry, NULL, out);
}

static const struct {
  const char *name;
  int (*make)(devmm_resource *up, devmm_resource **out);
} forwarding[] = {
    {"statistics", devmm_statistics_adaptor_create},
    {"statistics (sharded)", make_sharded},
    {"tracking", make_tracking},
    {"logging", make_logging},
    {"aligned", make_aligned},
    {"failure_callback", make_failure},
    {"thread_safe", devmm_thread_safe_adaptor_create},
};

/* Each adaptor passes mem_info, copy, memset, stream_wait and synchronize to its upstream once,
 * with the caller's arguments, and hands the upstream's status and message back. */
START_TEST(adaptors_forward_every_optional_op) {
  recorder rec = {0};
  devmm_device cpu = {DEVMM_DEVICE_CPU, 0};
  devmm_resource *up, *ad;
  ck_assert_int_eq(devmm_resource_create(&recorder_ops, &rec, cpu, "recorder", 0, &up), DEVMM_OK);
  ck_assert_msg(forwarding[_i].make(up, &ad) == DEVMM_OK, "%s: %s", forwarding[_i].name,
                devmm_last_error());
  char a[8], b[8];
  devmm_stream s1 = (devmm_stream)0x10, s2 = (devmm_stream)0x20;
  for (int fail = 0; fail < 2; fail++) {
    rec.fail = fail;
    int want = fail ? DEVMM_EIO : DEVMM_OK;
    size_t f = 0, t = 0;
    ck_assert_int_eq(devmm_mem_info(ad, &f, &t), want);
    ck_assert_int_eq(rec.mem_info, fail + 1);
    if (!fail)
      ck_assert(f == 111 && t == 222);
    else
      ck_assert_str_eq(devmm_last_error(), "recorder: mem_info failed");
    ck_assert_int_eq(devmm_copy(ad, a, b, 5, s1), want);
    ck_assert(rec.copy == fail + 1 && rec.dst == a && rec.src == b && rec.bytes == 5 &&
              rec.a == s1);
    ck_assert_int_eq(devmm_memset(ad, b, 7, 3, s2), want);
    ck_assert(rec.memset == fail + 1 && rec.dst == b && rec.value == 7 && rec.bytes == 3 &&
              rec.a == s2);
    ck_assert_int_eq(devmm_stream_wait(ad, s1, s2), want);
    ck_assert(rec.stream_wait == fail + 1 && rec.a == s1 && rec.b == s2);
    ck_assert_int_eq(devmm_synchronize(ad, s2), want);
    ck_assert(rec.synchronize == fail + 1 && rec.a == s2);
    if (fail)
      ck_assert_str_eq(devmm_last_error(), "recorder: synchronize failed");
  }
  ck_assert_int_eq(devmm_resource_refcount(up), 2); /* mine and the adaptor's */
  devmm_resource_release(ad);
  ck_assert_int_eq(devmm_resource_refcount(up), 1);
  devmm_resource_release(up);
}
END_TEST

/* The limiting adaptor answers mem_info itself: the limit, and what is left of it (never more
 * than the upstream has). */
START_TEST(limiting_mem_info) {
  recorder rec = {0};
  devmm_device cpu = {DEVMM_DEVICE_CPU, 0};
  devmm_resource *up, *lim;
  ck_assert_int_eq(devmm_resource_create(&recorder_ops, &rec, cpu, "recorder", 0, &up), DEVMM_OK);
  ck_assert_int_eq(devmm_limiting_adaptor_create(up, 200, &lim), DEVMM_OK);
  size_t f, t;
  void *p;
  ck_assert_int_eq(devmm_mem_info(lim, &f, &t), DEVMM_OK);
  ck_assert(f == 111 && t == 200); /* upstream's free 111 < 200 left; limit 200 < total 222 */
  ck_assert_int_eq(devmm_allocate(lim, 150, 0, NULL, &p), DEVMM_OK);
  ck_assert_int_eq(devmm_mem_info(lim, &f, &t), DEVMM_OK);
  ck_assert(f == 50 && t == 200); /* 50 left of the limit */
  rec.fail = 1;                   /* an upstream that cannot tell: the limit alone */
  ck_assert_int_eq(devmm_mem_info(lim, &f, &t), DEVMM_OK);
  ck_assert(f == 50 && t == 200);
  ck_assert_str_eq(devmm_last_error(), ""); /* the upstream's failure is not reported */
  rec.fail = 0;
  devmm_deallocate(lim, p, 150, 0, NULL);
  devmm_resource_release(lim);
  ck_assert_int_eq(devmm_limiting_adaptor_create(up, 100, &lim), DEVMM_OK);
  ck_assert_int_eq(devmm_mem_info(lim, &f, &t), DEVMM_OK);
  ck_assert(f == 100 && t == 100); /* the limit is below the upstream's figures */
  devmm_resource_release(lim);
  devmm_resource_release(up);
}
END_TEST

Suite *adaptors_suite(void) {
  Suite *s = suite_create("adaptors");
  TCase *tc = tcase_create("core");
  tcase_add_loop_test(tc, adaptors_forward_every_optional_op, 0,
                      (int)(sizeof forwarding / sizeof forwarding[0]));
  tcase_add_test(tc, limiting_mem_info);
  suite_add_tcase(s, tc);
  return s;
}
