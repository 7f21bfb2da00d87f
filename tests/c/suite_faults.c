/* Suite faults: out-of-memory injected under every stack shape, a failed allocation leaves the
 * registry alone, fork after init. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "testres.h"

static const devmm_device CPU = {DEVMM_DEVICE_CPU, 0};
/* Out-of-memory injected at the bottom of every stack shape leaves every figure consistent. */
START_TEST(oom_through_every_adaptor) {
  for (int fail_every = 2; fail_every <= 5; fail_every++) {
    testres *ts;
    devmm_resource *base = testres_create(&ts), *lim, *tr, *al, *ts_ad, *st;
    ck_assert_int_eq(devmm_limiting_adaptor_create(base, 1 << 20, &lim), 0);
    ck_assert_int_eq(devmm_tracking_adaptor_create(lim, 0, &tr), 0);
    ck_assert_int_eq(devmm_aligned_adaptor_create(tr, 256, 0, &al), 0);
    ck_assert_int_eq(devmm_thread_safe_adaptor_create(al, &ts_ad), 0);
    ck_assert_int_eq(devmm_statistics_adaptor_create(ts_ad, &st), 0);
    void *p[64] = {0};
    int ok = 0, refused = 0;
    for (int i = 0; i < 64; i++) {
      atomic_store(&ts->fail_at, (i % fail_every == 0) ? atomic_load(&ts->allocs) + 1 : 0);
      int rc = devmm_allocate(st, 100 + (size_t)i, 0, NULL, &p[i]);
      if (rc) {
        ck_assert_int_eq(rc, DEVMM_ENOMEM);
        ck_assert_error_contains("injected failure");
        ck_assert_ptr_null(p[i]);
        refused++;
      } else {
        ck_assert_uint_eq((uintptr_t)p[i] % 256, 0);
        ok++;
      }
    }
    devmm_statistics s;
    devmm_statistics_get(st, &s);
    size_t used, n, bytes;
    devmm_limiting_get(lim, &used, NULL);
    devmm_tracking_outstanding(tr, &n, &bytes);
    ck_assert_int_eq(s.current_count, ok);
    ck_assert_int_eq(s.total_count, ok);
    ck_assert_uint_eq(n, (size_t)ok);
    ck_assert_uint_eq(used, bytes);
    ck_assert_int_eq(ts->live_bytes, (long)bytes);
    ck_assert_int_gt(refused, 0);
    for (int i = 0; i < 64; i++)
      if (p[i])
        ck_assert_int_eq(devmm_deallocate(st, p[i], 100 + (size_t)i, 0, NULL), 0);
    devmm_statistics_get(st, &s);
    devmm_limiting_get(lim, &used, NULL);
    devmm_tracking_outstanding(tr, &n, &bytes);
    ck_assert_int_eq(s.current_bytes, 0);
    ck_assert_uint_eq(used + n + bytes, 0);
    ck_assert_int_eq(ts->live_bytes, 0);
    devmm_resource *all[] = {st, ts_ad, al, tr, lim, base};
    for (int i = 0; i < 6; i++)
      devmm_resource_release(all[i]);
  }
}
END_TEST

/* A buffer whose allocation fails leaves no buffer and no registry change behind. */
START_TEST(failed_allocation_leaves_registry_alone) {
  testres *ts;
  devmm_resource *r = testres_create(&ts), *prev = NULL, *got;
  ck_assert_int_eq(devmm_set_current_resource(CPU, r, &prev), 0);
  atomic_store(&ts->fail_from, 1);
  devmm_tensor *t;
  int64_t shape[1] = {10};
  devmm_dtype f32 = {DEVMM_DTYPE_FLOAT, 32, 1};
  ck_assert_int_eq(devmm_tensor_empty(NULL, CPU, NULL, 1, shape, f32, NULL, &t), DEVMM_ENOMEM);
  ck_assert_ptr_null(t);
  ck_assert_int_eq(devmm_get_current_resource(CPU, &got), 0);
  ck_assert_ptr_eq(got, r);
  ck_assert_int_eq(devmm_resource_refcount(r), 3); /* mine, the registry's, got: nothing else */
  devmm_resource_release(got);
  devmm_set_current_resource(CPU, prev, NULL);
  devmm_resource_release(prev);
  devmm_resource_release(r);
}
END_TEST

/* fork() after init: the child allocates through the inherited registry; neither side frees
 * the other's state twice (each frees its own copy-on-write memory). */
START_TEST(fork_after_init) {
  char path[TESTRES_PATH_MAX];
  int fd = testres_mkstemp(path, sizeof path, "fork");
  const char *ini = "[device cpu]\nresource = cpu.malloc\nadaptors = statistics, tracking\n";
  ck_assert_int_eq(write(fd, ini, strlen(ini)), (ssize_t)strlen(ini));
  close(fd);
  setenv("DEVMM_LOG_LEVEL", "error", 1);
  ck_assert_int_eq(devmm_init(path), 0);
  devmm_resource *r;
  ck_assert_int_eq(devmm_get_current_resource(CPU, &r), 0);
  void *parent;
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &parent), 0);
  pid_t pid = fork();
  if (pid == 0) {
    devmm_resource *c;
    void *p;
    size_t n = 0;
    int bad = devmm_get_current_resource(CPU, &c) || devmm_allocate(c, 100, 0, NULL, &p);
    if (!bad) {
      memset(p, 1, 100);
      bad |= devmm_deallocate(c, p, 100, 0, NULL);
      bad |= devmm_deallocate(c, parent, 4096, 0, NULL); /* the child's copy of it */
      devmm_tracking_outstanding(c, &n, NULL);
      devmm_resource_release(c);
    }
    devmm_resource_release(r);
    devmm_shutdown();
    _exit(bad || n != 0 ? 1 : 0);
  }
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  size_t n;
  ck_assert_int_eq(devmm_tracking_outstanding(r, &n, NULL), 0);
  ck_assert_uint_eq(n, 1); /* the parent's allocation is still the parent's */
  ck_assert_int_eq(devmm_deallocate(r, parent, 4096, 0, NULL), 0);
  devmm_resource_release(r);
  devmm_shutdown();
  unlink(path);
}
END_TEST

Suite *faults_suite(void) {
  Suite *s = suite_create("faults");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, oom_through_every_adaptor);
  tcase_add_test(tc, failed_allocation_leaves_registry_alone);
  tcase_add_test(tc, fork_after_init);
  suite_add_tcase(s, tc);
  return s;
}
