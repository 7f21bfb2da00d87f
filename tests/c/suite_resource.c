/* Suite resource: allocation, refcounts and destruction, bad input, device names (parse and
 * format), alignment 0, copy and memset on host-accessible memory. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "testres.h"

static const devmm_device CPU = {DEVMM_DEVICE_CPU, 0};
START_TEST(resource_allocate_roundtrip) {
  testres *s;
  devmm_resource *r = testres_create(&s);
  ck_assert_str_eq(devmm_resource_name(r), "test.malloc");
  ck_assert_int_eq(devmm_resource_device(r).device_type, DEVMM_DEVICE_CPU);
  void *p;
  ck_assert_int_eq(devmm_allocate(r, 100, 0, NULL, &p), DEVMM_OK);
  memset(p, 1, 100);
  ck_assert_int_eq(devmm_deallocate(r, p, 100, 0, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(r, 100, 4096, NULL, &p), DEVMM_OK);
  ck_assert_uint_eq((uintptr_t)p % 4096, 0);
  ck_assert_int_eq(devmm_deallocate(r, p, 100, 4096, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(r, 0, 0, NULL, &p), DEVMM_OK);
  ck_assert_ptr_null(p);
  ck_assert_int_eq(devmm_deallocate(r, NULL, 0, 0, NULL), DEVMM_OK);
  ck_assert_int_eq(s->allocs, 2);
  ck_assert_int_eq(s->frees, 2);
  devmm_resource_release(r);
}
END_TEST

START_TEST(resource_refcount_and_destroy) {
  int destroyed = 0;
  testres *s;
  devmm_resource *r = testres_create(&s);
  s->destroyed = &destroyed;
  ck_assert_int_eq(devmm_resource_refcount(r), 1);
  devmm_resource_retain(r);
  devmm_resource_release(r);
  ck_assert_int_eq(destroyed, 0);
  devmm_resource *st;
  ck_assert_int_eq(devmm_statistics_adaptor_create(r, &st), DEVMM_OK);
  ck_assert_int_eq(devmm_resource_refcount(r), 2);
  ck_assert_ptr_eq(devmm_resource_upstream(st), r);
  ck_assert_str_eq(devmm_resource_name(st), "statistics(test.malloc)");
  devmm_resource_release(r);
  ck_assert_int_eq(destroyed, 0); /* the adaptor still holds it */
  devmm_resource_release(st);
  ck_assert_int_eq(destroyed, 1);
  devmm_resource_release(NULL);
}
END_TEST

static int a_only(devmm_resource *self, size_t b, size_t a, devmm_stream s, void **o) {
  (void)self, (void)b, (void)a, (void)s;
  *o = NULL;
  return DEVMM_OK;
}
static int d_only(devmm_resource *self, void *p, size_t b, size_t a, devmm_stream s) {
  (void)self, (void)p, (void)b, (void)a, (void)s;
  return DEVMM_OK;
}

START_TEST(resource_bad_input) {
  devmm_resource *r = NULL;
  devmm_resource_ops ops = {sizeof ops, a_only, NULL};
  ck_assert_int_eq(devmm_resource_create(&ops, NULL, CPU, "x", 0, &r), DEVMM_EINVAL);
  ck_assert_error_contains("ops.allocate and ops.deallocate are required");
  ck_assert_ptr_null(r);
  ops.deallocate = d_only;
  ops.struct_size = 3;
  ck_assert_int_eq(devmm_resource_create(&ops, NULL, CPU, "x", 0, &r), DEVMM_EINVAL);
  ck_assert_error_contains("struct_size 3");
  ck_assert_int_eq(devmm_resource_create(NULL, NULL, CPU, "x", 0, &r), DEVMM_EINVAL);
  ck_assert_error_contains("ops is NULL");
  ck_assert_int_eq(devmm_resource_create(&ops, NULL, CPU, "x", 0, NULL), DEVMM_EINVAL);
  /* an older, shorter ops table: entries past struct_size read as NULL */
  ops.struct_size = offsetof(devmm_resource_ops, mem_info);
  ck_assert_int_eq(devmm_resource_create(&ops, NULL, CPU, "old", 0, &r), DEVMM_OK);
  size_t f, t;
  ck_assert_int_eq(devmm_mem_info(r, &f, &t), DEVMM_ENOTSUP);
  ck_assert_error_contains("resource 'old' does not support mem_info");
  char buf[4];
  ck_assert_int_eq(devmm_copy(r, buf, buf + 1, 1, NULL), DEVMM_ENOTSUP);
  ck_assert_int_eq(devmm_memset(r, buf, 0, 1, NULL), DEVMM_ENOTSUP);
  ck_assert_int_eq(devmm_stream_wait(r, NULL, NULL), DEVMM_OK);
  void *p;
  ck_assert_int_eq(devmm_allocate(r, 8, 3, NULL, &p), DEVMM_EINVAL);
  ck_assert_error_contains("alignment 3 is not a power of two up to 2^40");
  ck_assert_int_eq(devmm_allocate(NULL, 8, 0, NULL, &p), DEVMM_EINVAL);
  ck_assert_error_contains("resource is NULL");
  ck_assert_int_eq(devmm_allocate(r, 8, 0, NULL, NULL), DEVMM_EINVAL);
  ck_assert_error_contains("out is NULL");
  ck_assert_int_eq(devmm_deallocate(NULL, buf, 8, 0, NULL), DEVMM_EINVAL);
  ck_assert_int_eq(devmm_mem_info(NULL, &f, &t), DEVMM_EINVAL);
  devmm_resource_release(r);
}
END_TEST

START_TEST(device_parse_format) {
  devmm_device d;
  char buf[32];
  ck_assert_int_eq(devmm_device_parse("cuda:3", &d), DEVMM_OK);
  ck_assert_int_eq(d.device_type, DEVMM_DEVICE_CUDA);
  ck_assert_int_eq(d.device_id, 3);
  ck_assert_int_eq(devmm_device_format(d, buf, sizeof buf), DEVMM_OK);
  ck_assert_str_eq(buf, "cuda:3");
  ck_assert_int_eq(devmm_device_parse("cpu", &d), DEVMM_OK);
  devmm_device_format(d, buf, sizeof buf);
  ck_assert_str_eq(buf, "cpu");
  ck_assert_int_eq(devmm_device_parse("rocm", &d), DEVMM_OK);
  ck_assert_int_eq(d.device_type, DEVMM_DEVICE_ROCM);
  ck_assert_int_eq(devmm_device_parse("tpu:0", &d), DEVMM_EINVAL);
  ck_assert_error_contains("unknown device 'tpu:0'");
  ck_assert_int_eq(devmm_device_parse("cuda:x", &d), DEVMM_EINVAL);
  ck_assert_error_contains("must be an integer");
  ck_assert_int_eq(devmm_device_parse("cuda:-1", &d), DEVMM_EINVAL);
  ck_assert_int_eq(devmm_device_format(d, buf, 2), DEVMM_EINVAL);
  /* what format prints, parse reads back: every named type, cpu:N, and a plugin's own device
   * type (DLPack's oneAPI, 14, has no name in devmm: "device14:0") */
  static const int32_t types[] = {DEVMM_DEVICE_CPU,
                                  DEVMM_DEVICE_CUDA,
                                  DEVMM_DEVICE_CUDA_HOST,
                                  DEVMM_DEVICE_ROCM,
                                  DEVMM_DEVICE_ROCM_HOST,
                                  DEVMM_DEVICE_SIM,
                                  DEVMM_DEVICE_CUDA_MANAGED,
                                  4,
                                  7,
                                  14,
                                  17,
                                  1000,
                                  2147483647};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    for (int32_t id = 0; id < 3; id++) {
      devmm_device in = {types[i], id}, back = {0, -1};
      ck_assert_int_eq(devmm_device_format(in, buf, sizeof buf), DEVMM_OK);
      ck_assert_msg(devmm_device_parse(buf, &back) == DEVMM_OK, "%s: %s", buf, devmm_last_error());
      ck_assert_msg(back.device_type == in.device_type && back.device_id == id, "%s", buf);
    }
  ck_assert_int_eq(devmm_device_parse("device14", &d), DEVMM_OK);
  ck_assert_int_eq(d.device_type, 14);
  ck_assert_int_eq(d.device_id, 0);
  ck_assert_int_eq(devmm_device_parse("device:0", &d), DEVMM_EINVAL);
  ck_assert_int_eq(devmm_device_parse("device0:0", &d), DEVMM_EINVAL);
  ck_assert_int_eq(devmm_device_parse("device14x:0", &d), DEVMM_EINVAL);
  ck_assert_int_eq(devmm_device_parse("device99999999999:0", &d), DEVMM_EINVAL);
  ck_assert_int_eq(devmm_device_parse("gpu", &d), DEVMM_EINVAL);
  ck_assert_error_contains("expected cpu[:N], cuda[:N], ");
  ck_assert_error_contains("or deviceT[:N]");
}
END_TEST

/* A minimal resource: allocate/deallocate only, recording the alignment its ops see. */
static size_t seen_align[2];
static int bare_alloc(devmm_resource *self, size_t b, size_t a, devmm_stream s, void **out) {
  (void)self, (void)s;
  seen_align[0] = a;
  *out = malloc(b);
  return DEVMM_OK;
}
static int bare_free(devmm_resource *self, void *p, size_t b, size_t a, devmm_stream s) {
  (void)self, (void)b, (void)s;
  seen_align[1] = a;
  free(p);
  return DEVMM_OK;
}
static const devmm_resource_ops bare_ops = {
    .struct_size = sizeof bare_ops, .allocate = bare_alloc, .deallocate = bare_free};

/* Alignment 0 is resolved before the op: the op sees DEVMM_DEFAULT_ALIGNMENT, on both sides. */
START_TEST(resource_alignment_zero_never_reaches_ops) {
  devmm_resource *r;
  ck_assert_int_eq(devmm_resource_create(&bare_ops, NULL, CPU, "bare", 0, &r), DEVMM_OK);
  void *p;
  ck_assert_int_eq(devmm_allocate(r, 24, 0, NULL, &p), DEVMM_OK);
  ck_assert_uint_eq(seen_align[0], DEVMM_DEFAULT_ALIGNMENT);
  ck_assert_int_eq(devmm_deallocate(r, p, 24, 0, NULL), DEVMM_OK);
  ck_assert_uint_eq(seen_align[1], DEVMM_DEFAULT_ALIGNMENT);
  ck_assert_int_eq(devmm_allocate(r, 24, 4096, NULL, &p), DEVMM_OK);
  ck_assert_uint_eq(seen_align[0], 4096); /* an explicit alignment passes unchanged */
  devmm_deallocate(r, p, 24, 4096, NULL);
  ck_assert_uint_eq(seen_align[1], 4096);
  devmm_resource_release(r);
}
END_TEST

/* A host-accessible resource without copy/memset gets the host's; others still say ENOTSUP. */
START_TEST(resource_host_accessible_gets_copy_and_memset) {
  devmm_resource *h, *d;
  ck_assert_int_eq(
      devmm_resource_create(&bare_ops, NULL, CPU, "bare", DEVMM_RESOURCE_HOST_ACCESSIBLE, &h),
      DEVMM_OK);
  char *a, *b;
  ck_assert_int_eq(devmm_allocate(h, 16, 0, NULL, (void **)&a), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(h, 16, 0, NULL, (void **)&b), DEVMM_OK);
  ck_assert_int_eq(devmm_memset(h, a, 0x5a, 16, NULL), DEVMM_OK);
  ck_assert_int_eq(a[0], 0x5a);
  ck_assert_int_eq(a[15], 0x5a);
  ck_assert_int_eq(devmm_copy(h, b, a, 16, NULL), DEVMM_OK);
  ck_assert_int_eq(memcmp(a, b, 16), 0);
  ck_assert_int_eq(devmm_copy(h, a + 1, a, 8, NULL), DEVMM_OK); /* overlapping: memmove */
  devmm_deallocate(h, a, 16, 0, NULL);
  devmm_deallocate(h, b, 16, 0, NULL);
  devmm_resource_release(h);
  devmm_device sim = {DEVMM_DEVICE_SIM, 0};
  ck_assert_int_eq(devmm_resource_create(&bare_ops, NULL, sim, "bare.dev", 0, &d), DEVMM_OK);
  char x[4], y[4] = {1, 2, 3, 4};
  ck_assert_int_eq(devmm_copy(d, x, y, 4, NULL), DEVMM_ENOTSUP);
  ck_assert_error_contains("resource 'bare.dev' does not support copy");
  ck_assert_int_eq(devmm_memset(d, x, 0, 4, NULL), DEVMM_ENOTSUP);
  devmm_resource_release(d);
}
END_TEST

Suite *resource_suite(void) {
  Suite *s = suite_create("resource");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, resource_allocate_roundtrip);
  tcase_add_test(tc, resource_alignment_zero_never_reaches_ops);
  tcase_add_test(tc, resource_host_accessible_gets_copy_and_memset);
  tcase_add_test(tc, resource_refcount_and_destroy);
  tcase_add_test(tc, resource_bad_input);
  tcase_add_test(tc, device_parse_format);
  suite_add_tcase(s, tc);
  return s;
}
