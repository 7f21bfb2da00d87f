/* Interchange in C: the default base alignment of tensors (ADR 13), the legacy export of a
 * read-only tensor, what a resource says it is (devmm_adaptor_kind), host-accessible devices,
 * the packed dtype of the FFI entry points. The Python built-ins (ADR 12) are exercised by the
 * Python suites, which are the only callers that have an interpreter. */
#include "testres.h"

#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const devmm_device CPU = {DEVMM_DEVICE_CPU, 0};

/* A resource on any device that records the alignment it was asked for and, with `refuse`,
 * answers DEVMM_ENOTSUP above 16 bytes, as a runtime with a fixed alignment does. Its memory
 * is host memory: GPU devices are only labels here (this test double stands in for a GPU). */
typedef struct {
  size_t last_alignment;
  int refuse, allocs, frees;
} recorder;

static int rec_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream s,
                        void **out) {
  (void)s;
  recorder *r = devmm_resource_context(self);
  r->last_alignment = align;
  if (r->refuse && align > 16) {
    *out = NULL;
    return devmm_set_error(DEVMM_ENOTSUP, "recorder: alignment %zu is above 16 bytes", align);
  }
  if (posix_memalign(out, align > sizeof(void *) ? align : sizeof(void *), bytes ? bytes : 1))
    return devmm_set_error(DEVMM_ENOMEM, "recorder: out of memory");
  r->allocs++;
  return DEVMM_OK;
}

static int rec_deallocate(devmm_resource *self, void *p, size_t bytes, size_t align,
                          devmm_stream s) {
  (void)bytes, (void)align, (void)s;
  recorder *r = devmm_resource_context(self);
  r->frees++;
  free(p);
  return DEVMM_OK;
}

static int rec_copy(devmm_resource *self, void *d, const void *src, size_t n, devmm_stream s) {
  (void)self, (void)s;
  memcpy(d, src, n);
  return DEVMM_OK;
}

static const devmm_resource_ops rec_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = rec_allocate,
    .deallocate = rec_deallocate,
    .copy = rec_copy,
};

static devmm_resource *recorder_on(devmm_device d, recorder *state) {
  devmm_resource *r;
  ck_assert_int_eq(devmm_resource_create(&rec_ops, state, d, "recorder", 0, &r), DEVMM_OK);
  return r;
}

static devmm_dtype dtype(const char *name) {
  devmm_dtype t;
  ck_assert_int_eq(devmm_dtype_parse(name, &t), DEVMM_OK);
  return t;
}

START_TEST(default_alignment_per_device) {
  ck_assert_uint_eq(devmm_tensor_default_alignment(CPU), 64);
  ck_assert_uint_eq(devmm_tensor_default_alignment((devmm_device){DEVMM_DEVICE_CUDA_HOST, 0}), 64);
  ck_assert_uint_eq(devmm_tensor_default_alignment((devmm_device){DEVMM_DEVICE_ROCM_HOST, 0}), 64);
  ck_assert_uint_eq(devmm_tensor_default_alignment((devmm_device){DEVMM_DEVICE_CUDA, 3}), 256);
  ck_assert_uint_eq(devmm_tensor_default_alignment((devmm_device){DEVMM_DEVICE_ROCM, 0}), 256);
  ck_assert_uint_eq(devmm_tensor_default_alignment((devmm_device){DEVMM_DEVICE_CUDA_MANAGED, 0}),
                    256);
}
END_TEST

/* Every non-empty default tensor asks its resource for the default alignment, whatever its
 * size and dtype; a layout that asks for more keeps its own; an empty tensor asks nothing. */
START_TEST(tensor_empty_asks_for_the_default_alignment) {
  const struct {
    int32_t type;
    size_t want;
  } devices[] = {{DEVMM_DEVICE_CPU, 64}, {DEVMM_DEVICE_CUDA, 256}, {DEVMM_DEVICE_ROCM, 256}};
  const char *types[] = {"int8", "float16", "float32", "complex128"};
  for (size_t d = 0; d < sizeof devices / sizeof devices[0]; d++) {
    recorder st = {0};
    devmm_device dev = {devices[d].type, 0};
    devmm_resource *r = recorder_on(dev, &st);
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
      for (int64_t n = 1; n <= 1000; n = n * 3 + 1) {
        devmm_tensor *t;
        ck_assert_int_eq(devmm_tensor_empty(r, dev, NULL, 1, &n, dtype(types[k]), NULL, &t),
                         DEVMM_OK);
        ck_assert_uint_eq(st.last_alignment, devices[d].want);
        ck_assert_uint_eq((uintptr_t)devmm_tensor_data(t) % devices[d].want, 0);
        devmm_tensor_destroy(t);
      }
    devmm_layout big = devmm_layout_aligned(DEVMM_LAYOUT_ROW_MAJOR, 512, 1024);
    int64_t shape[2] = {3, 5};
    devmm_tensor *t;
    ck_assert_int_eq(devmm_tensor_empty(r, dev, &big, 2, shape, dtype("float32"), NULL, &t),
                     DEVMM_OK);
    ck_assert_uint_eq(st.last_alignment, 1024);
    devmm_tensor_destroy(t);
    int64_t zero[2] = {0, 5};
    int before = st.allocs;
    ck_assert_int_eq(devmm_tensor_empty(r, dev, NULL, 2, zero, dtype("float32"), NULL, &t),
                     DEVMM_OK);
    ck_assert_int_eq(st.allocs, before); /* nothing to allocate, nothing to align */
    ck_assert_ptr_null(devmm_tensor_data(t));
    devmm_tensor_destroy(t);
    ck_assert_int_eq(st.allocs, st.frees);
    devmm_resource_release(r);
  }
}
END_TEST

/* A resource that cannot align that far still serves default tensors (with its own alignment);
 * an alignment the layout itself asks for is still refused, with the resource's message. */
START_TEST(default_alignment_refused_falls_back) {
  recorder st = {.refuse = 1};
  devmm_resource *r = recorder_on(CPU, &st);
  int64_t n = 10;
  devmm_tensor *t;
  ck_assert_int_eq(devmm_tensor_empty(r, CPU, NULL, 1, &n, dtype("float32"), NULL, &t), DEVMM_OK);
  ck_assert_uint_eq(st.last_alignment, DEVMM_DEFAULT_ALIGNMENT); /* ops never see 0 */
  ck_assert_int_eq(st.allocs, 1);
  devmm_tensor_destroy(t);
  devmm_layout l = devmm_layout_aligned(DEVMM_LAYOUT_ROW_MAJOR, 64, 64);
  ck_assert_int_eq(devmm_tensor_empty(r, CPU, &l, 1, &n, dtype("float32"), NULL, &t),
                   DEVMM_ENOTSUP);
  ck_assert_error_contains("recorder: alignment 64 is above 16 bytes");
  ck_assert_ptr_null(t);
  ck_assert_int_eq(st.allocs, st.frees);
  devmm_resource_release(r);
}
END_TEST

/* A copy is a default tensor of its destination: aligned the same way. */
START_TEST(tensor_copy_is_aligned_by_default) {
  recorder src = {0}, dst = {0};
  devmm_resource *rs = recorder_on(CPU, &src), *rd = recorder_on(CPU, &dst);
  devmm_layout padded = devmm_layout_aligned(DEVMM_LAYOUT_ROW_MAJOR, 128, 0);
  int64_t shape[2] = {3, 5};
  devmm_tensor *t, *c;
  ck_assert_int_eq(devmm_tensor_empty(rs, CPU, &padded, 2, shape, dtype("int8"), NULL, &t),
                   DEVMM_OK);
  ck_assert_int_eq(devmm_tensor_copy(t, rd, &c), DEVMM_OK);
  ck_assert_uint_eq(dst.last_alignment, 64);
  ck_assert_uint_eq((uintptr_t)devmm_tensor_data(c) % 64, 0);
  ck_assert_int_eq(devmm_tensor_strides(c)[0], 5);
  devmm_tensor_destroy(c);
  devmm_tensor_destroy(t);
  devmm_resource_release(rs);
  devmm_resource_release(rd);
}
END_TEST

/* A legacy DLManagedTensor has no read-only flag: a read-only tensor is refused, holds
 * nothing, and the versioned export carries the flag. */
START_TEST(readonly_tensor_refuses_a_legacy_export) {
  testres *s;
  devmm_resource *r = testres_create(&s);
  devmm_buffer *b;
  ck_assert_int_eq(devmm_buffer_allocate(r, 64, 0, NULL, &b), DEVMM_OK);
  int64_t shape = 16, stride = 1;
  devmm_tensor *ro, *rw;
  ck_assert_int_eq(devmm_tensor_create(b, dtype("float32"), 1, &shape, &stride, 0, 1, &ro),
                   DEVMM_OK);
  ck_assert_int_eq(devmm_tensor_create(b, dtype("float32"), 1, &shape, &stride, 0, 0, &rw),
                   DEVMM_OK);
  devmm_dlmanaged *m = (devmm_dlmanaged *)1;
  ck_assert_int_eq(devmm_tensor_to_dlpack(ro, &m), DEVMM_ENOTSUP);
  ck_assert_error_contains("read-only tensor cannot go out as a legacy DLManagedTensor");
  ck_assert_error_contains("hand it a writable copy (Python: t.copy(); C: devmm_tensor_copy)");
  ck_assert_error_contains("max_version >= (1, 0)");
  ck_assert_ptr_null(m);
  devmm_dlmanaged_versioned *v;
  ck_assert_int_eq(devmm_tensor_to_dlpack_versioned(ro, 0, &v), DEVMM_OK);
  ck_assert_uint_eq(v->flags, DEVMM_DLPACK_FLAG_READ_ONLY);
  ck_assert_int_eq(devmm_tensor_to_dlpack(rw, &m), DEVMM_OK); /* a writable one still goes */
  devmm_tensor_destroy(ro);
  devmm_tensor_destroy(rw);
  devmm_buffer_free(b);
  devmm_buffer_release(b);
  ck_assert_int_eq(s->frees, 0); /* the two exports hold it */
  v->deleter(v);
  m->deleter(m);
  ck_assert_int_eq(s->frees, 1); /* the refused export held nothing */
  devmm_resource_release(r);
}
END_TEST

START_TEST(adaptor_kind_names_each_adaptor) {
  devmm_resource *base = testres_create(NULL), *a[7];
  ck_assert_int_eq(devmm_statistics_adaptor_create(base, &a[0]), DEVMM_OK);
  ck_assert_int_eq(devmm_statistics_adaptor_create_ex(base, DEVMM_STATISTICS_SHARDED, &a[1]),
                   DEVMM_OK);
  ck_assert_int_eq(devmm_limiting_adaptor_create(base, 100, &a[2]), DEVMM_OK);
  ck_assert_int_eq(devmm_tracking_adaptor_create(base, 0, &a[3]), DEVMM_OK);
  ck_assert_int_eq(devmm_aligned_adaptor_create(base, 256, 0, &a[4]), DEVMM_OK);
  ck_assert_int_eq(devmm_thread_safe_adaptor_create(base, &a[5]), DEVMM_OK);
  ck_assert_int_eq(devmm_logging_adaptor_create(base, "/dev/null", 0, &a[6]), DEVMM_OK);
  const char *want[] = {"statistics", "statistics",  "limiting", "tracking",
                        "aligned",    "thread_safe", "logging"};
  for (int i = 0; i < 7; i++) {
    ck_assert_str_eq(devmm_adaptor_kind(a[i]), want[i]);
    devmm_resource_release(a[i]);
  }
  ck_assert_ptr_null(devmm_adaptor_kind(base)); /* a plain resource is no adaptor */
  ck_assert_ptr_null(devmm_adaptor_kind(NULL));
  devmm_resource_release(base);
}
END_TEST

START_TEST(host_accessible_devices) {
  ck_assert_int_eq(devmm_device_host_accessible(CPU), 1);
  ck_assert_int_eq(devmm_device_host_accessible((devmm_device){DEVMM_DEVICE_CUDA_HOST, 0}), 1);
  ck_assert_int_eq(devmm_device_host_accessible((devmm_device){DEVMM_DEVICE_ROCM_HOST, 0}), 1);
  ck_assert_int_eq(devmm_device_host_accessible((devmm_device){DEVMM_DEVICE_CUDA_MANAGED, 1}), 1);
  ck_assert_int_eq(devmm_device_host_accessible((devmm_device){DEVMM_DEVICE_CUDA, 0}), 0);
  ck_assert_int_eq(devmm_device_host_accessible((devmm_device){DEVMM_DEVICE_ROCM, 0}), 0);
  ck_assert_int_eq(devmm_device_host_accessible((devmm_device){99, 0}), 0);
}
END_TEST

/* The device whose current resource memory of a device is: managed memory's GPU, else its own
 * (docs/api.md, the registry; tests/python/test_rmm_devices.py). */
static int32_t home(int32_t type, int32_t id, int32_t *hid) {
  devmm_device h = devmm_device_home((devmm_device){type, id});
  *hid = h.device_id;
  return h.device_type;
}

START_TEST(home_devices) {
  int32_t id;
  ck_assert_int_eq(home(DEVMM_DEVICE_CUDA_MANAGED, 3, &id), DEVMM_DEVICE_CUDA);
  ck_assert_int_eq(id, 3);
  ck_assert_int_eq(home(DEVMM_DEVICE_SIM_MANAGED, 1, &id), DEVMM_DEVICE_SIM);
  ck_assert_int_eq(id, 1);
  ck_assert_int_eq(home(DEVMM_DEVICE_CUDA_HOST, 0, &id), DEVMM_DEVICE_CUDA_HOST);
  ck_assert_int_eq(home(DEVMM_DEVICE_SIM_HOST, 0, &id), DEVMM_DEVICE_SIM_HOST);
  ck_assert_int_eq(home(DEVMM_DEVICE_ROCM, 2, &id), DEVMM_DEVICE_ROCM);
  ck_assert_int_eq(id, 2);
  ck_assert_int_eq(home(DEVMM_DEVICE_CPU, 0, &id), DEVMM_DEVICE_CPU);
  ck_assert_int_eq(home(99, 4, &id), 99);
  ck_assert_int_eq(id, 4);
}
END_TEST

START_TEST(ffi_dtype_pack_round_trips) {
  devmm_dtype t = dtype("bfloat16");
  uint32_t p = devmm_ffi_dtype_pack(t);
  ck_assert_uint_eq(p, (uint32_t)t.code | 16u << 8 | 1u << 16);
  int64_t n = 3;
  devmm_tensor *x =
      devmm_ffi_tensor_empty(NULL, (int64_t)DEVMM_DEVICE_CPU << 32, NULL, 1, &n, p, NULL);
  ck_assert_msg(x != NULL, "%s", devmm_last_error());
  ck_assert_int_eq(devmm_tensor_dtype(x).code, t.code);
  ck_assert_int_eq(devmm_tensor_dtype(x).bits, 16);
  ck_assert_uint_eq((uintptr_t)devmm_tensor_data(x) % 64, 0);
  devmm_tensor_destroy(x);
}
END_TEST

/* ---------------------------------------------------------------- exports racing the owner's free
 * One thread exports a tensor in a loop while another frees its buffer: every export that
 * succeeds must point at memory it holds (data never NULL, the allocation still live until its
 * deleter runs), and one that fails must hold nothing. Before the fix the export read the
 * owner-gated pointer after taking its hold (data NULL when the free came in between), and the
 * hold could be taken from 0 after the memory was gone (check-then-act). Run under TSan too. */
typedef struct {
  devmm_tensor *t;
  atomic_int go;      /* 1: export until refused; -1: stop */
  atomic_int started; /* the exporter is in its loop */
  atomic_long bad;    /* exports with data NULL or over memory already given back */
  atomic_long made;   /* exports that succeeded */
  testres *res;
} race;

static void *exporter(void *arg) {
  race *x = arg;
  for (;;) {
    int g;
    while ((g = atomic_load(&x->go)) == 0)
      sched_yield();
    if (g < 0)
      return NULL;
    devmm_dlmanaged_versioned *m;
    atomic_store(&x->started, 1);
    while (devmm_tensor_to_dlpack_versioned(x->t, 0, &m) == DEVMM_OK) {
      atomic_fetch_add(&x->made, 1);
      /* the export holds the memory: it cannot be given back before the deleter */
      if (!m->dl_tensor.data || atomic_load(&x->res->frees) != atomic_load(&x->res->allocs) - 1)
        atomic_fetch_add(&x->bad, 1);
      else
        ((volatile char *)m->dl_tensor.data)[0] = 1; /* and it is there to be written */
      m->deleter(m);
    }
    atomic_store(&x->go, 0);
  }
}

START_TEST(export_racing_free_holds_or_refuses) {
  race x = {.bad = 0, .started = 0};
  devmm_resource *r = testres_create(&x.res);
  int64_t n = 256;
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, exporter, &x), 0);
  /* 2,000 rounds, or 15 s where threads crawl (valgrind runs them one at a time) */
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int rounds = 0;
  for (int i = 0; i < 2000; i++, rounds++) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (i > 100 && now.tv_sec - t0.tv_sec > 15)
      break;
    ck_assert_int_eq(devmm_tensor_empty(r, CPU, NULL, 1, &n, dtype("float32"), NULL, &x.t),
                     DEVMM_OK);
    atomic_store(&x.started, 0);
    atomic_store(&x.go, 1);
    while (!atomic_load(&x.started))
      sched_yield();
    for (volatile int spin = i % 64; spin > 0; spin--)
      ; /* vary where the free lands in the exporter's loop */
    devmm_buffer_free(devmm_tensor_buffer(x.t));
    while (atomic_load(&x.go) != 0)
      sched_yield();
    devmm_tensor_destroy(x.t);
    long frees = atomic_load(&x.res->frees);
    ck_assert_int_eq(frees, i + 1); /* given back once: nothing held, nothing leaked */
  }
  atomic_store(&x.go, -1);
  pthread_join(th, NULL);
  ck_assert_msg(atomic_load(&x.bad) == 0, "%ld of %ld exports had no memory behind them",
                atomic_load(&x.bad), atomic_load(&x.made));
  ck_assert_int_gt(atomic_load(&x.made), rounds / 2); /* the race was run, not skipped */
  devmm_resource_release(r);
}
END_TEST

Suite *interchange_suite(void) {
  Suite *s = suite_create("interchange");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, default_alignment_per_device);
  tcase_add_test(tc, tensor_empty_asks_for_the_default_alignment);
  tcase_add_test(tc, default_alignment_refused_falls_back);
  tcase_add_test(tc, tensor_copy_is_aligned_by_default);
  tcase_add_test(tc, readonly_tensor_refuses_a_legacy_export);
  tcase_add_test(tc, adaptor_kind_names_each_adaptor);
  tcase_add_test(tc, host_accessible_devices);
  tcase_add_test(tc, home_devices);
  tcase_add_test(tc, ffi_dtype_pack_round_trips);
  suite_add_tcase(s, tc);
  TCase *threads = tcase_create("threads");
  tcase_set_timeout(threads, 120);
  tcase_add_test(threads, export_racing_free_holds_or_refuses);
  suite_add_tcase(s, threads);
  return s;
}
