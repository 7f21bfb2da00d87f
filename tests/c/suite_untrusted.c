/* Suite untrusted: every public entry point given NULLs, negative, zero, huge and overflowing
 * values; symbolic-link tricks in the plugin path. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testres.h"

static const devmm_device CPU = {DEVMM_DEVICE_CPU, 0};

static int never(size_t b, int a, void *u) {
  (void)b, (void)a, (void)u;
  return 0;
}

/* Each call is checked on its own, right after it returns: a negative status, that status as the
 * thread's last status, and a message naming what was wrong (the message is cleared first, so a
 * call that sets none cannot pass on an earlier call's message). */
#define REFUSED(what, needle, call)                                                                \
  do {                                                                                             \
    devmm_clear_error();                                                                           \
    int rc_ = (call);                                                                              \
    ck_assert_msg(rc_ < 0 && devmm_last_status() == rc_ && strstr(devmm_last_error(), needle),     \
                  "%s: rc %d, status %d, message '%s' (expected '%s')", what, rc_,                 \
                  devmm_last_status(), devmm_last_error(), needle);                                \
    checked++;                                                                                     \
  } while (0)

/* Every public entry point, given NULL where a pointer is needed: a clear error, no crash. */
START_TEST(null_arguments_everywhere) {
  int checked = 0;
  devmm_resource *r = testres_create(NULL), *out = (void *)1, *lim, *tr;
  ck_assert_int_eq(devmm_limiting_adaptor_create(r, 1000, &lim), DEVMM_OK); /* has mem_info */
  ck_assert_int_eq(devmm_tracking_adaptor_create(r, 0, &tr), DEVMM_OK);
  void *p = (void *)1;
  size_t z;
  devmm_statistics st;
  devmm_allocation_info info;
  devmm_layout_result lr;
  int64_t shape[1] = {4}, strides[1];
  devmm_dtype f32 = {DEVMM_DTYPE_FLOAT, 32, 1};
  devmm_tensor *t = (void *)1;
  devmm_buffer *b = (void *)1;
  REFUSED("allocate", "devmm_allocate: resource is NULL", devmm_allocate(NULL, 8, 0, NULL, &p));
  REFUSED("allocate out", "devmm_allocate: out is NULL", devmm_allocate(r, 8, 0, NULL, NULL));
  REFUSED("deallocate", "devmm_deallocate: resource is NULL",
          devmm_deallocate(NULL, p, 8, 0, NULL));
  REFUSED("mem_info", "devmm_mem_info: output is NULL", devmm_mem_info(lim, NULL, NULL));
  REFUSED("copy", "devmm_copy: dst is NULL", devmm_copy(r, NULL, &z, 8, NULL));
  REFUSED("memset", "devmm_memset: dst is NULL", devmm_memset(r, NULL, 0, 8, NULL));
  REFUSED("stream_wait", "devmm_stream_wait: resource is NULL",
          devmm_stream_wait(NULL, NULL, NULL));
  REFUSED("synchronize", "devmm_synchronize: resource is NULL", devmm_synchronize(NULL, NULL));
  REFUSED("resource_create", "devmm_resource_create: ops is NULL",
          devmm_resource_create(NULL, NULL, CPU, "x", 0, &out));
  REFUSED("statistics_create", "statistics adaptor: upstream is NULL",
          devmm_statistics_adaptor_create(NULL, &out));
  REFUSED("statistics_get", "expected a statistics adaptor, got NULL",
          devmm_statistics_get(NULL, &st));
  REFUSED("statistics_push", "expected a statistics adaptor, got NULL",
          devmm_statistics_push(NULL));
  REFUSED("statistics_pop", "expected a statistics adaptor, got NULL",
          devmm_statistics_pop(NULL, &st));
  REFUSED("statistics_reset", "expected a statistics adaptor, got NULL",
          devmm_statistics_reset_peak(NULL));
  REFUSED("limiting_create", "limiting adaptor: upstream is NULL",
          devmm_limiting_adaptor_create(NULL, 1, &out));
  REFUSED("limiting_get", "expected a limiting adaptor, got NULL",
          devmm_limiting_get(NULL, &z, &z));
  REFUSED("tracking_create", "tracking adaptor: upstream is NULL",
          devmm_tracking_adaptor_create(NULL, 0, &out));
  REFUSED("tracking_lookup", "expected a tracking adaptor, got NULL",
          devmm_tracking_lookup(NULL, p, &info));
  REFUSED("tracking_outstanding", "expected a tracking adaptor, got NULL",
          devmm_tracking_outstanding(NULL, &z, &z));
  REFUSED("tracking_foreach", "devmm_tracking_foreach: fn is NULL",
          devmm_tracking_foreach(tr, NULL, NULL));
  REFUSED("tracking_report", "expected a tracking adaptor, got NULL",
          devmm_tracking_report(NULL, NULL));
  REFUSED("logging_create", "logging adaptor: upstream is NULL",
          devmm_logging_adaptor_create(NULL, NULL, 0, &out));
  REFUSED("logging_flush", "expected a logging adaptor, got NULL", devmm_logging_flush(NULL));
  REFUSED("aligned_create", "aligned adaptor: upstream is NULL",
          devmm_aligned_adaptor_create(NULL, 64, 0, &out));
  REFUSED("failure_create", "failure_callback adaptor: upstream is NULL",
          devmm_failure_callback_adaptor_create(NULL, never, NULL, &out));
  REFUSED("statistics_create out", "statistics adaptor: upstream is NULL",
          devmm_statistics_adaptor_create(NULL, NULL));
  REFUSED("limiting_create out", "devmm_resource_create: out is NULL",
          devmm_limiting_adaptor_create(r, 1, NULL));
  REFUSED("tracking_create out", "devmm_resource_create: out is NULL",
          devmm_tracking_adaptor_create(r, 0, NULL));
  REFUSED("logging_create out", "logging adaptor: out is NULL",
          devmm_logging_adaptor_create(r, NULL, 0, NULL));
  REFUSED("aligned_create out", "devmm_resource_create: out is NULL",
          devmm_aligned_adaptor_create(r, 64, 0, NULL));
  REFUSED("failure_create out", "devmm_resource_create: out is NULL",
          devmm_failure_callback_adaptor_create(r, never, NULL, NULL));
  REFUSED("thread_safe_create out", "devmm_resource_create: out is NULL",
          devmm_thread_safe_adaptor_create(r, NULL));
  REFUSED("statistics_create stats out", "devmm_resource_create: out is NULL",
          devmm_statistics_adaptor_create(r, NULL));
  REFUSED("thread_safe_create", "thread_safe adaptor: upstream is NULL",
          devmm_thread_safe_adaptor_create(NULL, &out));
  REFUSED("callback_create", "callback resource: allocate is NULL",
          devmm_callback_resource_create(NULL, NULL, NULL, NULL, CPU, "x", 0, &out));
  REFUSED("get_current", "devmm_get_current_resource: out is NULL",
          devmm_get_current_resource(CPU, NULL));
  REFUSED("layout_compute",
          "devmm_layout_compute: layout, result, shape and strides must not be NULL",
          devmm_layout_compute(NULL, 1, shape, 4, strides, &lr));
  REFUSED("layout_compute shape",
          "devmm_layout_compute: layout, result, shape and strides must not be NULL",
          devmm_layout_compute(&(devmm_layout){0}, 1, NULL, 4, strides, &lr));
  REFUSED("dtype_parse", "devmm_dtype_parse: name is NULL", devmm_dtype_parse(NULL, &f32));
  REFUSED("dtype_format", "devmm_dtype_format: empty buffer", devmm_dtype_format(f32, NULL, 8));
  REFUSED("device_parse", "devmm_device_parse: text is NULL", devmm_device_parse(NULL, NULL));
  REFUSED("device_format", "devmm_device_format: empty buffer", devmm_device_format(CPU, NULL, 0));
  REFUSED("buffer_allocate", "devmm_buffer_allocate: resource is NULL",
          devmm_buffer_allocate(NULL, 8, 0, NULL, &b));
  REFUSED("buffer_acquire", "devmm_buffer_acquire: buffer is NULL", devmm_buffer_acquire(NULL));
  REFUSED("tensor_create", "devmm_tensor_create: buffer is NULL",
          devmm_tensor_create(NULL, f32, 1, shape, shape, 0, 0, &t));
  REFUSED("tensor_empty out", "devmm_tensor_empty: out is NULL",
          devmm_tensor_empty(r, CPU, NULL, 1, shape, f32, NULL, NULL));
  REFUSED("tensor_empty shape", "shape and strides must not be NULL",
          devmm_tensor_empty(r, CPU, NULL, 1, NULL, f32, NULL, &t));
  REFUSED("tensor_zero", "devmm_tensor_zero: tensor is NULL", devmm_tensor_zero(NULL));
  REFUSED("tensor_copy", "devmm_tensor_copy: tensor is NULL", devmm_tensor_copy(NULL, r, &t));
  REFUSED("to_dlpack_versioned", "devmm_tensor_to_dlpack_versioned: out is NULL",
          devmm_tensor_to_dlpack_versioned(NULL, 0, NULL));
  REFUSED("to_dlpack out", "devmm_tensor_to_dlpack: out is NULL",
          devmm_tensor_to_dlpack((devmm_tensor *)1, NULL));
  REFUSED("to_dlpack", "devmm_tensor_to_dlpack: tensor is NULL",
          devmm_tensor_to_dlpack(NULL, (devmm_dlmanaged **)&p));
  REFUSED("plugin_get", "devmm_plugin_get: out is NULL", devmm_plugin_get(0, NULL));
  REFUSED("device_get", "devmm_device_get: out is NULL", devmm_device_get(0, NULL));
  REFUSED("create_kind", "devmm_resource_create_kind: kind is NULL",
          devmm_resource_create_kind(NULL, 0, NULL, 0, &out));
  REFUSED("create_kind options", "devmm_resource_create_kind: options is NULL",
          devmm_resource_create_kind("cpu.malloc", 0, NULL, 1, &out));
  REFUSED("info_json", "devmm_info_json: out is NULL", devmm_info_json(NULL));
  REFUSED("parse_size", "devmm_parse_size: text is NULL", devmm_parse_size(NULL, 0, &z));
  ck_assert_int_eq(checked, 58);
  /* release/destroy/free functions accept NULL */
  devmm_resource_release(NULL);
  devmm_buffer_release(NULL);
  devmm_buffer_free(NULL);
  devmm_buffer_unacquire(NULL);
  devmm_tensor_destroy(NULL);
  devmm_string_free(NULL);
  ck_assert_ptr_null(devmm_resource_retain(NULL));
  ck_assert_ptr_null(devmm_buffer_ptr(NULL));
  devmm_resource_release(tr);
  devmm_resource_release(lim);
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
  ck_assert_int_eq(devmm_layout_compute(&al, 2, small, 4, st, &lr), DEVMM_EOVERFLOW);
  ck_assert_error_contains("layout: span of 13835058055282163712 bytes exceeds the largest "
                           "allocation (2^63-1 bytes)");
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
  ck_assert_int_eq(devmm_parse_size("1000000000000000000000000000000", 0, &v), DEVMM_EOVERFLOW);
  ck_assert_int_eq(devmm_parse_size("1e30", 0, &v), DEVMM_EINVAL); /* decimal only */
  ck_assert_int_eq(devmm_parse_size("nan", 0, &v), DEVMM_EINVAL);
  ck_assert_int_eq(devmm_parse_size("inf GiB", 0, &v), DEVMM_EINVAL);
  ck_assert_int_eq(ts->live_bytes, 0);
  devmm_resource_release(r);
}
END_TEST

/* Symlinks in plugin_path may not lead to a directory or file others can write. */
START_TEST(symlink_tricks_refused) {
  setenv("DEVMM_LOG_LEVEL", "error", 1);
  unsetenv("DEVMM_PLUGIN_PATH");
  char base[TESTRES_PATH_MAX], evil[TESTRES_PATH_MAX + 8], good[TESTRES_PATH_MAX + 8],
      link[TESTRES_PATH_MAX + 32], so[TESTRES_PATH_MAX + 32], src[1024], ini[TESTRES_PATH_MAX + 16],
      cmd[5 * TESTRES_PATH_MAX];
  testres_mkdtemp(base, sizeof base, "sym");
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
  tcase_add_test(tc, symlink_tricks_refused);
  suite_add_tcase(s, tc);
  return s;
}
