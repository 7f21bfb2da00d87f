/* Suite sim_core: the core's device-generic logic (copies, stream hand-over, frees, zeros) on a
 * device whose memory the host cannot touch and whose streams really run out of order.
 * Environment (set by Meson): DEVMM_PLUGIN_PATH (the plugins' build directory). */
#include <check.h>
#include <stdlib.h>

#include "sim_env.h"

static devmm_tensor *host_tensor(devmm_resource *cpu, int64_t n, int first) {
  devmm_tensor *t;
  devmm_layout rm = devmm_layout_row_major();
  ck_assert_int_eq(devmm_tensor_empty(cpu, CPU, &rm, 1, &n, U8, NULL, &t), DEVMM_OK);
  unsigned char *d = devmm_tensor_data(t);
  for (int64_t i = 0; i < n; i++)
    d[i] = (unsigned char)(first + i);
  return t;
}

/* A CPU tensor copied to the device went through the source (CPU) resource: a memmove into
 * device memory, a SIGSEGV. */
START_TEST(copy_host_to_device_and_back) {
  sim_init(300, 15);
  devmm_resource *cpu = kind("cpu.malloc", 0), *dev = kind("sim.async", 0);
  devmm_tensor *h = host_tensor(cpu, 1000, 3), *d = NULL, *back = NULL;
  ck_assert_msg(devmm_tensor_copy(h, dev, &d) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_int_eq(devmm_buffer_device(devmm_tensor_buffer(d)).device_type, DEVMM_DEVICE_SIM);
  ck_assert_msg(devmm_tensor_copy(d, cpu, &back) == DEVMM_OK, "%s", devmm_last_error());
  const unsigned char *b = devmm_tensor_data(back);
  for (int i = 0; i < 1000; i++)
    ck_assert_int_eq(b[i], (unsigned char)(3 + i));
  devmm_tensor_destroy(h);
  devmm_tensor_destroy(d);
  devmm_tensor_destroy(back);
  devmm_resource_release(cpu);
  devmm_resource_release(dev);
}
END_TEST

START_TEST(copy_between_devices_and_padded) {
  sim_init(300, 16);
  devmm_resource *cpu = kind("cpu.malloc", 0), *d0 = kind("sim.async", 0),
                 *d1 = kind("sim.async", 1);
  /* a padded 3 x 5 source (strides 8, 1) on sim:0 -> compact on sim:1 -> host */
  devmm_tensor *h = host_tensor(cpu, 24, 0), *pad, *x0, *x1, *back;
  int64_t shape[2] = {3, 5}, strides[2] = {8, 1};
  ck_assert_int_eq(devmm_tensor_copy(h, d0, &x0), DEVMM_OK);
  ck_assert_int_eq(devmm_tensor_create(devmm_tensor_buffer(x0), U8, 2, shape, strides, 0, 0, &pad),
                   DEVMM_OK);
  ck_assert_msg(devmm_tensor_copy(pad, d1, &x1) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_int_eq(devmm_buffer_device(devmm_tensor_buffer(x1)).device_id, 1);
  ck_assert_int_eq(devmm_tensor_strides(x1)[0], 5);
  ck_assert_msg(devmm_tensor_copy(x1, cpu, &back) == DEVMM_OK, "%s", devmm_last_error());
  const unsigned char *b = devmm_tensor_data(back);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 5; j++)
      ck_assert_int_eq(b[i * 5 + j], i * 8 + j);
  devmm_tensor *objs[] = {h, pad, x0, x1, back};
  for (int i = 0; i < 5; i++)
    devmm_tensor_destroy(objs[i]);
  devmm_resource_release(cpu);
  devmm_resource_release(d0);
  devmm_resource_release(d1);
}
END_TEST

static int host_alloc(void *u, size_t n, size_t a, devmm_stream s, void **out) {
  (void)u, (void)s; /* aligned as asked: a callback's pointer is checked (callback.c) */
  return posix_memalign(out, a > sizeof(void *) ? a : sizeof(void *), n ? n : 1) == 0
             ? DEVMM_OK
             : DEVMM_ENOMEM;
}
static int host_free(void *u, void *p, size_t n, size_t a, devmm_stream s) {
  (void)u, (void)n, (void)a, (void)s;
  free(p);
  return DEVMM_OK;
}

START_TEST(copy_needs_a_resource_that_addresses_both_sides) {
  sim_init(0, 17);
  devmm_resource *d0 = kind("sim.async", 0), *cpu = kind("cpu.malloc", 0), *other, *bare;
  devmm_device cuda = {DEVMM_DEVICE_CUDA, 0};
  ck_assert_int_eq(devmm_callback_resource_create(host_alloc, host_free, NULL, NULL, cuda,
                                                  "other.runtime", 0, &other),
                   DEVMM_OK);
  devmm_tensor *h = host_tensor(cpu, 16, 0), *x, *y = (devmm_tensor *)1;
  ck_assert_int_eq(devmm_tensor_copy(h, d0, &x), DEVMM_OK);
  ck_assert_int_eq(devmm_tensor_copy(x, other, &y), DEVMM_ENOTSUP);
  ck_assert_error_contains("tensor copy sim:0 -> cuda:0: no resource can address both (two "
                           "runtimes): copy to cpu first");
  ck_assert_ptr_null(y);
  /* a device resource without a copy op says so */
  devmm_device s0 = {DEVMM_DEVICE_SIM, 0};
  ck_assert_int_eq(
      devmm_callback_resource_create(host_alloc, host_free, NULL, NULL, s0, "no.ops", 0, &bare),
      DEVMM_OK);
  ck_assert_int_eq(devmm_tensor_copy(h, bare, &y), DEVMM_ENOTSUP);
  ck_assert_error_contains("tensor copy cpu -> sim:0 through 'no.ops': resource 'no.ops' does not "
                           "support copy");
  devmm_tensor_destroy(h);
  devmm_tensor_destroy(x);
  devmm_resource_release(other);
  devmm_resource_release(bare);
  devmm_resource_release(cpu);
  devmm_resource_release(d0);
}
END_TEST

/* The copy's destination was allocated on the NULL stream and written on the source's stream
 * with no event between: its block, still owned by a free queued on the NULL stream, was
 * poisoned by that free after the copy wrote it. */
START_TEST(copy_destination_is_ordered_with_the_copy) {
  sim_init(100, 18);
  devmm_resource *cpu = kind("cpu.malloc", 0), *d0 = kind("sim.async", 0);
  void *x, *old;
  /* the source, on a stream that does not wait for the legacy stream (as torch's and CuPy's) */
  ck_assert_int_eq(sim.stream_create(0, 1, &x), DEVMM_OK);
  devmm_tensor *h = host_tensor(cpu, 4096, 9), *src, *dst, *back;
  devmm_layout rm = devmm_layout_row_major();
  int64_t n = 4096;
  ck_assert_int_eq(
      devmm_tensor_empty(d0, (devmm_device){DEVMM_DEVICE_SIM, 0}, &rm, 1, &n, U8, x, &src),
      DEVMM_OK);
  ck_assert_int_eq(devmm_copy(d0, devmm_tensor_data(src), devmm_tensor_data(h), 4096, x), DEVMM_OK);
  /* a block of the same size whose free is queued on the NULL stream, behind 50 ms of work */
  ck_assert_int_eq(devmm_allocate(d0, 4096, 0, NULL, &old), DEVMM_OK);
  sim.launch(NULL, sleep_kernel, (void *)(intptr_t)50);
  ck_assert_int_eq(devmm_deallocate(d0, old, 4096, 0, NULL), DEVMM_OK);
  ck_assert_msg(devmm_tensor_copy(src, d0, &dst) == DEVMM_OK, "%s", devmm_last_error());
  sim.device_synchronize(0);
  ck_assert_int_eq(devmm_tensor_copy(dst, cpu, &back), DEVMM_OK);
  const unsigned char *b = devmm_tensor_data(back);
  for (int i = 0; i < 4096; i++)
    ck_assert_msg(b[i] == (unsigned char)(9 + i), "byte %d is %#x, expected %#x", i, b[i],
                  (unsigned char)(9 + i));
  devmm_tensor *objs[] = {h, src, dst, back};
  for (int i = 0; i < 4; i++)
    devmm_tensor_destroy(objs[i]);
  sim.stream_destroy(x);
  devmm_resource_release(cpu);
  devmm_resource_release(d0);
}
END_TEST

/* The free when the last consumer lets go ran on the allocation stream right away, while the
 * consumer's kernel was still queued on its own stream: the kernel read poison. */
START_TEST(free_after_last_consumer_waits_for_its_stream) {
  sim_init(100, 19);
  devmm_resource *d0 = kind("sim.async", 0);
  void *x = stream(0), *c = stream(0);
  devmm_buffer *b;
  ck_assert_int_eq(devmm_buffer_allocate(d0, 8192, 0, x, &b), DEVMM_OK);
  sim.fill(x, devmm_buffer_ptr(b), 0x3C, 8192);
  ck_assert_int_eq(devmm_buffer_acquire(b), DEVMM_OK); /* an export */
  ck_assert_int_eq(devmm_buffer_stream_wait(b, c), DEVMM_OK);
  int ok;
  sim.launch(c, sleep_kernel, (void *)(intptr_t)30); /* the consumer's work, still queued... */
  sim.check(c, devmm_buffer_ptr(b), 0x3C, 8192, &ok);
  devmm_buffer_free(b);      /* the owner lets go */
  devmm_buffer_unacquire(b); /* ...when the consumer lets go */
  devmm_buffer_release(b);
  sim.device_synchronize(0);
  ck_assert_msg(ok == 1, "the consumer's kernel read freed memory");
  sim.stream_destroy(x);
  sim.stream_destroy(c);
  devmm_resource_release(d0);
}
END_TEST

/* ...and it used the allocation stream even after the user had destroyed it. */
START_TEST(free_after_allocation_stream_is_destroyed) {
  sim_init(0, 20);
  devmm_resource *d0 = kind("sim.async", 0);
  uint64_t live = stats().allocations_live;
  void *x = stream(0);
  devmm_buffer *b;
  ck_assert_int_eq(devmm_buffer_allocate(d0, 8192, 0, x, &b), DEVMM_OK);
  ck_assert_int_eq(devmm_buffer_acquire(b), DEVMM_OK);
  devmm_buffer_free(b);
  ck_assert_int_eq(sim.stream_destroy(x), DEVMM_OK); /* legal: the owner is done with it */
  devmm_buffer_unacquire(b);                         /* the consumer lets go later */
  devmm_buffer_release(b);
  devmm_deferred_frees_wait(); /* the free is queued (stream-ordered) on sim:0's default stream */
  sim.device_synchronize(0);
  ck_assert_msg(stats().allocations_live == live, "the memory was not freed (%llu live)",
                (unsigned long long)stats().allocations_live);
  devmm_resource_release(d0);
}
END_TEST

/* zeros() on pinned memory queued the memset on a stream and returned: a host read saw 0xCD. */
START_TEST(zeros_on_pinned_memory_then_a_host_read) {
  sim_init(500, 21);
  devmm_resource *pin = kind("sim.pinned", 0);
  for (int round = 0; round < 5; round++) {
    devmm_tensor *t;
    devmm_layout rm = devmm_layout_row_major();
    int64_t n = 1 << 16;
    ck_assert_int_eq(devmm_tensor_empty(pin, CPU, &rm, 1, &n, U8, NULL, &t), DEVMM_OK);
    ck_assert_int_eq(devmm_tensor_zero(t), DEVMM_OK);
    const unsigned char *d = devmm_tensor_data(t);
    for (int i = 0; i < n; i++)
      ck_assert_msg(d[i] == 0, "round %d: byte %d is %#x after zero()", round, i, d[i]);
    devmm_tensor_destroy(t);
  }
  devmm_resource_release(pin);
}
END_TEST

/* A device resource without stream ops claimed every stream order silently. */
START_TEST(device_resource_without_stream_ops_cannot_order) {
  sim_init(0, 22);
  devmm_device s0 = {DEVMM_DEVICE_SIM, 0};
  devmm_resource *bare;
  ck_assert_int_eq(devmm_callback_resource_create(host_alloc, host_free, NULL, NULL, s0,
                                                  "python.pool", 0, &bare),
                   DEVMM_OK);
  void *a = stream(0), *b = stream(0);
  ck_assert_int_eq(devmm_stream_wait(bare, a, b), DEVMM_ENOTSUP);
  ck_assert_error_contains("resource 'python.pool' on sim:0 cannot order streams (it has no "
                           "stream_wait op)");
  ck_assert_int_eq(devmm_stream_wait(bare, a, a), DEVMM_OK);
  ck_assert_int_eq(devmm_synchronize(bare, a), DEVMM_ENOTSUP);
  devmm_resource_release(bare);
  sim.stream_destroy(a);
  sim.stream_destroy(b);
}
END_TEST

/* A callback resource on a device gets its copies and stream order from the device's runtime. */
START_TEST(callback_resource_with_a_runtime) {
  sim_init(200, 23);
  devmm_resource *dev = kind("sim.device", 0), *cb;
  devmm_device s0 = {DEVMM_DEVICE_SIM, 0}, s1 = {DEVMM_DEVICE_SIM, 1};
  ck_assert_int_eq(
      devmm_callback_resource_create_ex(host_alloc, host_free, NULL, NULL, s1, "x", 0, dev, &cb),
      DEVMM_EINVAL);
  ck_assert_error_contains("callback resource 'x' on sim:1: its runtime resource 'sim.device' is "
                           "on sim:0");
  /* device memory from "elsewhere" (here: sim.device itself), filled by the runtime */
  ck_assert_int_eq(
      devmm_callback_resource_create_ex(host_alloc, host_free, NULL, NULL, s0, "pool", 0, dev, &cb),
      DEVMM_OK);
  void *s = stream(0), *p;
  ck_assert_int_eq(devmm_allocate(dev, 4096, 0, NULL, &p), DEVMM_OK);
  ck_assert_int_eq(devmm_memset(cb, p, 0x44, 4096, s), DEVMM_OK);
  ck_assert_int_eq(devmm_synchronize(cb, s), DEVMM_OK);
  ck_assert_int_eq(((unsigned char *)sim.view(p, 4096))[4095], 0x44);
  size_t f, t;
  ck_assert_int_eq(devmm_mem_info(cb, &f, &t), DEVMM_OK);
  ck_assert_uint_eq(t, (size_t)64 << 20);
  devmm_deallocate(dev, p, 4096, 0, NULL);
  devmm_resource_release(cb);
  devmm_resource_release(dev);
  sim.stream_destroy(s);
}
END_TEST

/* The C side of torch's allocator: a status and a message, never NULL with success. */
START_TEST(torch_allocate_reports_out_of_memory) {
  sim_init(0, 24);
  devmm_resource *lim, *dev = kind("sim.async", 0), *prev = NULL;
  ck_assert_int_eq(devmm_limiting_adaptor_create(dev, 1 << 20, &lim), DEVMM_OK);
  devmm_device cuda3 = {DEVMM_DEVICE_CUDA, 3};
  ck_assert_int_eq(devmm_set_current_resource(cuda3, lim, &prev), DEVMM_OK);
  void *p = (void *)1, *q;
  ck_assert_int_eq(devmm_torch_allocate(2 << 20, 3, NULL, &p), DEVMM_ENOMEM);
  ck_assert_ptr_null(p);
  ck_assert_error_contains("torch allocation of 2097152 bytes on cuda:3: out of memory");
  ck_assert_int_eq(devmm_torch_allocate(4096, 3, NULL, &q), DEVMM_OK);
  ck_assert_ptr_nonnull(q);
  ck_assert_int_eq(devmm_torch_allocate(0, 3, NULL, &p), DEVMM_OK); /* torch's empty tensors */
  ck_assert_ptr_null(p);
  devmm_torch_deallocate(q, 4096, 3, NULL);
  ck_assert_int_eq(devmm_torch_allocate(16, 99, NULL, &p), DEVMM_EINVAL);
  ck_assert_error_contains("device 99 out of range");
  devmm_resource_release(prev);
  devmm_resource_release(lim);
  devmm_resource_release(dev);
}
END_TEST

Suite *sim_core_suite(void) {
  const TTest *const tests[] = {copy_host_to_device_and_back,
                                copy_between_devices_and_padded,
                                copy_needs_a_resource_that_addresses_both_sides,
                                copy_destination_is_ordered_with_the_copy,
                                free_after_last_consumer_waits_for_its_stream,
                                free_after_allocation_stream_is_destroyed,
                                zeros_on_pinned_memory_then_a_host_read,
                                device_resource_without_stream_ops_cannot_order,
                                callback_resource_with_a_runtime,
                                torch_allocate_reports_out_of_memory,
                                NULL};
  return suite_of("sim_core", tests);
}
