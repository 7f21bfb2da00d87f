/* Suites: faults (fault injection, fork), untrusted (every public entry point given NULLs,
 * negative, zero, huge and overflowing values; set-uid environment; plugin path tricks). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testres.h"

static const devmm_device CPU = {DEVMM_DEVICE_CPU, 0};

/* ================================================================ faults */

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
  char path[] = "/tmp/devmm-fork-XXXXXX";
  int fd = mkstemp(path);
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

/* ================================================================ untrusted */

static int never(size_t b, int a, void *u) {
  (void)b, (void)a, (void)u;
  return 0;
}

/* Every public entry point, given NULL where a pointer is needed: a clear error, no crash. */
START_TEST(null_arguments_everywhere) {
  devmm_resource *r = testres_create(NULL), *out = (void *)1;
  void *p = (void *)1;
  size_t z;
  devmm_statistics st;
  devmm_allocation_info info;
  devmm_layout_result lr;
  int64_t shape[1] = {4}, strides[1];
  devmm_dtype f32 = {DEVMM_DTYPE_FLOAT, 32, 1};
  devmm_tensor *t = (void *)1;
  devmm_buffer *b = (void *)1;
  struct {
    const char *what;
    int rc;
  } calls[] = {
      {"allocate", devmm_allocate(NULL, 8, 0, NULL, &p)},
      {"allocate out", devmm_allocate(r, 8, 0, NULL, NULL)},
      {"deallocate", devmm_deallocate(NULL, p, 8, 0, NULL)},
      {"mem_info", devmm_mem_info(r, NULL, NULL)},
      {"copy", devmm_copy(r, NULL, &z, 8, NULL)},
      {"memset", devmm_memset(r, NULL, 0, 8, NULL)},
      {"stream_wait", devmm_stream_wait(NULL, NULL, NULL)},
      {"synchronize", devmm_synchronize(NULL, NULL)},
      {"resource_create", devmm_resource_create(NULL, NULL, CPU, "x", 0, &out)},
      {"statistics_create", devmm_statistics_adaptor_create(NULL, &out)},
      {"statistics_get", devmm_statistics_get(NULL, &st)},
      {"statistics_push", devmm_statistics_push(NULL)},
      {"statistics_pop", devmm_statistics_pop(r, NULL)},
      {"statistics_reset", devmm_statistics_reset_peak(NULL)},
      {"limiting_create", devmm_limiting_adaptor_create(NULL, 1, &out)},
      {"limiting_get", devmm_limiting_get(NULL, &z, &z)},
      {"tracking_create", devmm_tracking_adaptor_create(NULL, 0, &out)},
      {"tracking_lookup", devmm_tracking_lookup(NULL, p, &info)},
      {"tracking_outstanding", devmm_tracking_outstanding(NULL, &z, &z)},
      {"tracking_foreach", devmm_tracking_foreach(r, NULL, NULL)},
      {"tracking_report", devmm_tracking_report(NULL, NULL)},
      {"logging_create", devmm_logging_adaptor_create(NULL, NULL, 0, &out)},
      {"logging_flush", devmm_logging_flush(NULL)},
      {"aligned_create", devmm_aligned_adaptor_create(NULL, 64, 0, &out)},
      {"failure_create", devmm_failure_callback_adaptor_create(NULL, never, NULL, &out)},
      {"thread_safe_create", devmm_thread_safe_adaptor_create(NULL, &out)},
      {"callback_create",
       devmm_callback_resource_create(NULL, NULL, NULL, NULL, CPU, "x", 0, &out)},
      {"get_current", devmm_get_current_resource(CPU, NULL)},
      {"layout_compute", devmm_layout_compute(NULL, 1, shape, 4, strides, &lr)},
      {"layout_compute shape", devmm_layout_compute(&(devmm_layout){0}, 1, NULL, 4, strides, &lr)},
      {"dtype_parse", devmm_dtype_parse(NULL, &f32)},
      {"dtype_format", devmm_dtype_format(f32, NULL, 8)},
      {"device_parse", devmm_device_parse(NULL, NULL)},
      {"device_format", devmm_device_format(CPU, NULL, 0)},
      {"buffer_allocate", devmm_buffer_allocate(NULL, 8, 0, NULL, &b)},
      {"buffer_acquire", devmm_buffer_acquire(NULL)},
      {"tensor_create", devmm_tensor_create(NULL, f32, 1, shape, shape, 0, 0, &t)},
      {"tensor_empty out", devmm_tensor_empty(r, CPU, NULL, 1, shape, f32, NULL, NULL)},
      {"tensor_empty shape", devmm_tensor_empty(r, CPU, NULL, 1, NULL, f32, NULL, &t)},
      {"tensor_zero", devmm_tensor_zero(NULL)},
      {"tensor_copy", devmm_tensor_copy(NULL, r, &t)},
      {"to_dlpack_versioned", devmm_tensor_to_dlpack_versioned(NULL, 0, NULL)},
      {"to_dlpack", devmm_tensor_to_dlpack(NULL, (devmm_dlmanaged **)&p)},
      {"plugin_get", devmm_plugin_get(0, NULL)},
      {"device_get", devmm_device_get(0, NULL)},
      {"create_kind", devmm_resource_create_kind(NULL, 0, NULL, 0, &out)},
      {"create_kind options", devmm_resource_create_kind("cpu.malloc", 0, NULL, 1, &out)},
      {"info_json", devmm_info_json(NULL)},
      {"parse_size", devmm_parse_size(NULL, 0, &z)},
  };
  for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++)
    ck_assert_msg(calls[i].rc < 0 && *devmm_last_error(), "%s: rc %d, message '%s'", calls[i].what,
                  calls[i].rc, devmm_last_error());
  /* release/destroy/free functions accept NULL */
  devmm_resource_release(NULL);
  devmm_buffer_release(NULL);
  devmm_buffer_free(NULL);
  devmm_buffer_unacquire(NULL);
  devmm_tensor_destroy(NULL);
  devmm_string_free(NULL);
  ck_assert_ptr_null(devmm_resource_retain(NULL));
  ck_assert_ptr_null(devmm_buffer_ptr(NULL));
  devmm_resource_release(r);
}
END_TEST

/* Huge, zero and overflowing values. */
START_TEST(huge_and_overflowing_values) {
  testres *ts;
  devmm_resource *r = testres_create(&ts), *lim;
  void *p;
  ck_assert_int_eq(devmm_allocate(r, SIZE_MAX, 0, NULL, &p), DEVMM_ENOMEM);
  ck_assert_ptr_null(p);
  ck_assert_int_eq(devmm_allocate(r, 8, (size_t)1 << 63, NULL, &p), DEVMM_EINVAL);
  ck_assert_error_contains("alignment 9223372036854775808 is not a power of two up to 2^40");
  ck_assert_int_eq(devmm_allocate(r, 8, SIZE_MAX, NULL, &p), DEVMM_EINVAL);
  ck_assert_int_eq(devmm_limiting_adaptor_create(r, SIZE_MAX, &lim), 0);
  ck_assert_int_eq(devmm_allocate(lim, SIZE_MAX - 1, 0, NULL, &p), DEVMM_ENOMEM);
  size_t used;
  devmm_limiting_get(lim, &used, NULL);
  ck_assert_uint_eq(used, 0); /* the refused request was taken back */
  devmm_resource_release(lim);
  devmm_layout rm = devmm_layout_row_major();
  int64_t shape[3] = {INT64_MAX, INT64_MAX, 2}, st[3];
  devmm_layout_result lr;
  ck_assert_int_eq(devmm_layout_compute(&rm, 3, shape, 8, st, &lr), DEVMM_EOVERFLOW);
  ck_assert_int_eq(devmm_layout_compute(&rm, -1, shape, 8, st, &lr), DEVMM_EINVAL);
  devmm_layout al = devmm_layout_aligned(DEVMM_LAYOUT_ROW_MAJOR, (size_t)1 << 62, 0);
  int64_t small[2] = {3, 3};
  ck_assert_int_ne(devmm_layout_compute(&al, 2, small, 4, st, &lr), DEVMM_OK);
  devmm_dtype f32 = {DEVMM_DTYPE_FLOAT, 32, 1};
  devmm_buffer *b;
  ck_assert_int_eq(devmm_buffer_allocate(r, 64, 0, NULL, &b), 0);
  devmm_tensor *t;
  int64_t one[1] = {1}, s1[1] = {1};
  ck_assert_int_eq(devmm_tensor_create(b, f32, 1, one, s1, SIZE_MAX - 2, 0, &t), DEVMM_EINVAL);
  int64_t big[1] = {INT64_MAX}, bigs[1] = {INT64_MAX};
  ck_assert_int_eq(devmm_tensor_create(b, f32, 1, big, bigs, 0, 0, &t), DEVMM_EOVERFLOW);
  ck_assert_int_eq(devmm_tensor_create(b, f32, 64, one, s1, 0, 0, &t), DEVMM_EINVAL);
  devmm_buffer_release(b);
  size_t v;
  ck_assert_int_eq(devmm_parse_size("1e30", 0, &v), DEVMM_EOVERFLOW);
  ck_assert_int_eq(devmm_parse_size("nan", 0, &v), DEVMM_EINVAL);
  ck_assert_int_eq(devmm_parse_size("inf GiB", 0, &v), DEVMM_EINVAL);
  ck_assert_int_eq(ts->live_bytes, 0);
  devmm_resource_release(r);
}
END_TEST

/* A set-uid process ignores DEVMM_CONFIG & co. (secure_getenv): a copy of a probe program made
 * set-uid root and run as nobody must fall back to the built-in default. Setting that up needs
 * root (CI runs as root); as another user only the first half can run, and the log says so. */
START_TEST(setuid_ignores_the_environment) {
  const char *probe = getenv("DEVMM_TEST_PROBE"), *ini = getenv("DEVMM_TEST_SETUID_INI");
  ck_assert_msg(probe && ini, "DEVMM_TEST_PROBE / DEVMM_TEST_SETUID_INI not set");
  char cmd[2048];
  /* not set-uid: the environment is honoured */
  snprintf(cmd, sizeof cmd, "DEVMM_CONFIG=%s %s | grep -qx '%s'", ini, probe, ini);
  ck_assert_int_eq(system(cmd), 0);
  if (geteuid() != 0) {
    fprintf(stderr, "setuid test: not root, the set-uid half cannot be set up\n");
    return;
  }
  char dir[] = "/tmp/devmm-suid-XXXXXX", copy[128];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  chmod(dir, 0755);
  snprintf(copy, sizeof copy, "%s/probe", dir);
  snprintf(cmd, sizeof cmd, "cp %s %s && chmod 4755 %s", probe, copy, copy);
  ck_assert_int_eq(system(cmd), 0);
  /* the control: the copy runs as nobody and honours the environment while not set-uid */
  snprintf(cmd, sizeof cmd,
           "chmod 0755 %s && cd / && DEVMM_CONFIG=%s setpriv --reuid=65534 --regid=65534 "
           "--clear-groups %s | grep -qx '%s' && chmod 4755 %s",
           copy, ini, copy, ini, copy);
  int control = system(cmd);
  snprintf(cmd, sizeof cmd,
           "cd / && DEVMM_CONFIG=%s setpriv --reuid=65534 --regid=65534 --clear-groups %s | "
           "grep -qx 'built-in default'",
           ini, copy);
  int rc = system(cmd);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  ck_assert_int_eq(system(cmd), 0);
  ck_assert_msg(control == 0, "the probe does not run as nobody: the test cannot tell");
  ck_assert_msg(rc == 0, "a set-uid program honoured DEVMM_CONFIG");
}
END_TEST

/* Symlinks in plugin_path may not lead to a directory or file others can write. */
START_TEST(symlink_tricks_refused) {
  setenv("DEVMM_LOG_LEVEL", "error", 1);
  unsetenv("DEVMM_PLUGIN_PATH");
  char base[] = "/tmp/devmm-sym-XXXXXX", evil[160], good[160], link[160], so[200], src[512],
       ini[200], cmd[1200];
  ck_assert_ptr_nonnull(mkdtemp(base));
  chmod(base, 0755);
  snprintf(evil, sizeof evil, "%s/evil", base);
  snprintf(good, sizeof good, "%s/good", base);
  snprintf(link, sizeof link, "%s/good/devmm-faulty.so", base);
  mkdir(evil, 0777);
  chmod(evil, 0777); /* world-writable: anyone could swap the file */
  mkdir(good, 0755);
  snprintf(so, sizeof so, "%s/devmm-faulty.so", evil);
  snprintf(src, sizeof src, "%s/devmm-faulty.so", getenv("DEVMM_TEST_PLUGINS"));
  snprintf(cmd, sizeof cmd, "cp %s %s && chmod 755 %s", src, so, so);
  ck_assert_int_eq(system(cmd), 0);
  ck_assert_int_eq(symlink(so, link), 0); /* a file symlink into the writable directory */
  snprintf(ini, sizeof ini, "%s/devmm.ini", base);
  FILE *f = fopen(ini, "w");
  fprintf(f, "[devmm]\nplugins = cpu, faulty\nplugin_path = %s\n", good);
  fclose(f);
  ck_assert_int_eq(devmm_init(ini), 0);
  devmm_plugin_status st = {0};
  devmm_plugin_get(1, &st);
  ck_assert_int_eq(st.loaded, 0);
  ck_assert_msg(strstr(st.error, "refusing plugin directory") && strstr(st.error, "/evil"), "%s",
                st.error);
  /* a directory symlink to the writable directory */
  unlink(link);
  rmdir(good);
  ck_assert_int_eq(symlink(evil, good), 0);
  ck_assert_int_eq(devmm_init(ini), 0);
  devmm_plugin_get(1, &st);
  ck_assert_int_eq(st.loaded, 0);
  ck_assert_msg(strstr(st.error, "writable by others"), "%s", st.error);
  devmm_shutdown();
  snprintf(cmd, sizeof cmd, "rm -rf %s", base);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

Suite *untrusted_suite(void) {
  Suite *s = suite_create("untrusted");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, null_arguments_everywhere);
  tcase_add_test(tc, huge_and_overflowing_values);
  tcase_add_test(tc, setuid_ignores_the_environment);
  tcase_add_test(tc, symlink_tricks_refused);
  suite_add_tcase(s, tc);
  return s;
}
