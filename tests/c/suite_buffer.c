/* Suite buffer: buffers and tensors: a free waits for the last hold (a prefetch's too), a
 * release without a free frees once, empty tensors and views. */
#include <check.h>

#include "testres.h"

#include <stdlib.h>

static const devmm_device CPU = {DEVMM_DEVICE_CPU, 0};

START_TEST(buffer_free_defers_to_last_hold) {
  testres *s;
  devmm_resource *r = testres_create(&s);
  devmm_buffer *b;
  ck_assert_int_eq(devmm_buffer_allocate(r, 64, 0, NULL, &b), DEVMM_OK);
  ck_assert_ptr_nonnull(devmm_buffer_ptr(b));
  ck_assert_int_eq(devmm_buffer_acquire(b), DEVMM_OK); /* an export */
  devmm_buffer_free(b);
  ck_assert_int_eq(devmm_buffer_is_freed(b), 1);
  ck_assert_int_eq(devmm_buffer_is_live(b), 1); /* the export still holds the memory */
  ck_assert_ptr_null(devmm_buffer_ptr(b));      /* but the owner can no longer use it */
  ck_assert_int_eq(s->frees, 0);
  devmm_buffer_free(b); /* twice: harmless */
  ck_assert_int_eq(s->frees, 0);
  ck_assert_int_eq(devmm_buffer_acquire(b), DEVMM_ESTATE);
  ck_assert_error_contains("was freed");
  devmm_buffer_unacquire(b); /* the export goes */
  ck_assert_int_eq(s->frees, 1);
  ck_assert_int_eq(devmm_buffer_is_live(b), 0);
  devmm_buffer_release(b);
  ck_assert_int_eq(s->frees, 1);
  ck_assert_int_eq(s->live_bytes, 0);
  devmm_resource_release(r);
}
END_TEST

START_TEST(buffer_release_without_free_frees_once) {
  testres *s;
  devmm_resource *r = testres_create(&s);
  devmm_buffer *b;
  ck_assert_int_eq(devmm_buffer_allocate(r, 64, 0, NULL, &b), DEVMM_OK);
  devmm_buffer_release(b);
  ck_assert_int_eq(s->frees, 1);
  ck_assert_int_eq(devmm_buffer_allocate(NULL, 64, 0, NULL, &b), DEVMM_EINVAL);
  ck_assert_ptr_null(b);
  s->fail_at = s->allocs + 1;
  ck_assert_int_eq(devmm_buffer_allocate(r, 64, 0, NULL, &b), DEVMM_ENOMEM);
  ck_assert_error_contains("injected failure");
  ck_assert_ptr_null(b);
  devmm_resource_release(r);
}
END_TEST

START_TEST(tensor_empty_and_views) {
  testres *s;
  devmm_resource *r = testres_create(&s);
  devmm_dtype f32;
  devmm_dtype_parse("float32", &f32);
  int64_t shape[2] = {4, 3};
  devmm_layout l = devmm_layout_aligned(DEVMM_LAYOUT_ROW_MAJOR, 128, 256);
  devmm_tensor *t;
  ck_assert_int_eq(devmm_tensor_empty(r, CPU, &l, 2, shape, f32, NULL, &t), DEVMM_OK);
  ck_assert_int_eq(devmm_tensor_ndim(t), 2);
  ck_assert_int_eq(devmm_tensor_strides(t)[0], 32);
  ck_assert_int_eq(devmm_tensor_strides(t)[1], 1);
  ck_assert_uint_eq(devmm_buffer_nbytes(devmm_tensor_buffer(t)), 512);
  ck_assert_uint_eq((uintptr_t)devmm_tensor_data(t) % 256, 0);
  ck_assert_uint_eq(devmm_tensor_size(t), 12);
  ck_assert_int_eq(devmm_tensor_zero(t), DEVMM_OK);
  ck_assert_int_eq(((float *)devmm_tensor_data(t))[31], 0.0f);
  /* a second view of the same buffer that does not fit */
  devmm_tensor *v;
  int64_t vs[1] = {200}, vst[1] = {1};
  ck_assert_int_eq(devmm_tensor_create(devmm_tensor_buffer(t), f32, 1, vs, vst, 0, 1, &v),
                   DEVMM_EINVAL);
  ck_assert_error_contains("does not fit in the buffer of 512 bytes");
  vs[0] = 128;
  ck_assert_int_eq(devmm_tensor_create(devmm_tensor_buffer(t), f32, 1, vs, vst, 0, 1, &v),
                   DEVMM_OK);
  ck_assert_int_eq(devmm_tensor_readonly(v), 1);
  devmm_buffer_free(devmm_tensor_buffer(t));
  ck_assert_ptr_null(devmm_tensor_data(v));
  ck_assert_int_eq(devmm_tensor_zero(v), DEVMM_ESTATE);
  ck_assert_int_eq(s->frees, 1);
  devmm_tensor_destroy(v);
  devmm_tensor_destroy(t);
  /* errors */
  devmm_dtype f4;
  devmm_dtype_parse("float4_e2m1fn", &f4);
  ck_assert_int_eq(devmm_tensor_empty(r, CPU, NULL, 2, shape, f4, NULL, &t), DEVMM_EINVAL);
  ck_assert_error_contains("sub-byte");
  int64_t bad[2] = {-1, 3};
  ck_assert_int_eq(devmm_tensor_empty(r, CPU, NULL, 2, bad, f32, NULL, &t), DEVMM_EINVAL);
  ck_assert_ptr_null(t);
  devmm_device cuda = {DEVMM_DEVICE_CUDA, 7};
  ck_assert_int_eq(devmm_tensor_empty(NULL, cuda, NULL, 2, shape, f32, NULL, &t), DEVMM_ENOENT);
  ck_assert_error_contains("no current resource for device cuda:7");
  ck_assert_int_eq(s->live_bytes, 0);
  devmm_resource_release(r);
}
END_TEST

/* A resource whose prefetch op frees the buffer being prefetched, as another thread's free can
 * land once devmm_buffer_prefetch has read the pointer: the memory must outlive the op. */
static devmm_buffer *prefetching;
static int freed_in_prefetch, deallocs;
static int p_allocate(devmm_resource *self, size_t n, size_t a, devmm_stream s, void **out) {
  (void)self, (void)a, (void)s;
  *out = malloc(n);
  return *out ? DEVMM_OK : devmm_set_error(DEVMM_ENOMEM, "no memory");
}
static int p_deallocate(devmm_resource *self, void *ptr, size_t n, size_t a, devmm_stream s) {
  (void)self, (void)n, (void)a, (void)s;
  free(ptr);
  deallocs++;
  return DEVMM_OK;
}
static int p_prefetch(devmm_resource *self, const void *ptr, size_t n, devmm_stream s) {
  (void)self, (void)ptr, (void)n, (void)s;
  devmm_buffer_free(prefetching); /* the other thread's free */
  freed_in_prefetch = deallocs;   /* 0: the memory is still there while the op uses it */
  return DEVMM_OK;
}

START_TEST(buffer_prefetch_holds_the_memory) {
  static const devmm_resource_ops ops = {.struct_size = sizeof ops,
                                         .allocate = p_allocate,
                                         .deallocate = p_deallocate,
                                         .prefetch = p_prefetch};
  devmm_resource *r;
  ck_assert_int_eq(devmm_resource_create(&ops, NULL, CPU, "test.prefetch", 0, &r), DEVMM_OK);
  ck_assert_int_eq(devmm_buffer_allocate(r, 64, 0, NULL, &prefetching), DEVMM_OK);
  ck_assert_int_eq(devmm_buffer_prefetch(prefetching, CPU, NULL), DEVMM_OK);
  ck_assert_int_eq(freed_in_prefetch, 0);
  ck_assert_int_eq(deallocs, 1); /* freed once the prefetch let go */
  ck_assert_int_eq(devmm_buffer_prefetch(prefetching, CPU, NULL), DEVMM_ESTATE);
  ck_assert_error_contains("was freed: nothing to prefetch");
  devmm_buffer_release(prefetching);
  ck_assert_int_eq(deallocs, 1);
  devmm_resource_release(r);
}
END_TEST

Suite *buffer_suite(void) {
  Suite *s = suite_create("buffer");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, buffer_free_defers_to_last_hold);
  tcase_add_test(tc, buffer_release_without_free_frees_once);
  tcase_add_test(tc, tensor_empty_and_views);
  tcase_add_test(tc, buffer_prefetch_holds_the_memory);
  suite_add_tcase(s, tc);
  return s;
}
