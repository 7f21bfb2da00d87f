/* Suite aligned: the aligned adaptor frees exactly what it allocated, over-allocates only when
 * needed, refuses bad alignments, and is safe from two threads. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testres.h"

/* An upstream that only knows 16-byte alignment and refuses more, like cudaMalloc's fixed one. */
static int fixed_alloc(devmm_resource *self, size_t b, size_t a, devmm_stream s, void **o) {
  (void)self, (void)s;
  if (a > 16)
    return devmm_set_error(DEVMM_ENOTSUP, "fixed: alignment %zu unsupported", a);
  *o = malloc(b);
  return *o ? DEVMM_OK : DEVMM_ENOMEM;
}
static int fixed_free(devmm_resource *self, void *p, size_t b, size_t a, devmm_stream s) {
  (void)self, (void)b, (void)a, (void)s;
  free(p);
  return DEVMM_OK;
}

/* A strict upstream: it remembers each allocation's size and alignment, refuses a free that
 * does not match them exactly (as a GPU pool would misbehave), can refuse large alignments with
 * a chosen status, and counts everything. */
#define STRICT_MAX 4096
typedef struct {
  pthread_mutex_t lock;
  int refuse_above; /* alignments above this are refused with `refusal` */
  int refusal;      /* DEVMM_ENOTSUP or DEVMM_EINVAL or DEVMM_ENOMEM */
  int allocs, frees, mismatches, live;
  struct {
    void *p;
    size_t bytes, align;
  } a[STRICT_MAX];
} strict;

static int strict_alloc(devmm_resource *self, size_t b, size_t al, devmm_stream s, void **o) {
  (void)s;
  strict *st = devmm_resource_context(self);
  if (st->refuse_above && al > (size_t)st->refuse_above) {
    *o = NULL;
    return devmm_set_error(st->refusal, "strict: alignment %zu refused", al);
  }
  void *p = NULL;
  if (posix_memalign(&p, al > sizeof(void *) ? al : sizeof(void *), b ? b : 1))
    return devmm_set_error(DEVMM_ENOMEM, "strict: out of memory");
  pthread_mutex_lock(&st->lock);
  int i = 0;
  while (i < STRICT_MAX - 1 && st->a[i].p)
    i++;
  ck_assert_ptr_null(st->a[i].p); /* a full table fails the test */
  st->a[i].p = p, st->a[i].bytes = b, st->a[i].align = al;
  st->allocs++, st->live++;
  pthread_mutex_unlock(&st->lock);
  *o = p;
  return DEVMM_OK;
}

static int strict_free(devmm_resource *self, void *p, size_t b, size_t al, devmm_stream s) {
  (void)s;
  strict *st = devmm_resource_context(self);
  pthread_mutex_lock(&st->lock);
  int i = 0;
  while (i < STRICT_MAX && st->a[i].p != p)
    i++;
  int ok = i < STRICT_MAX && st->a[i].bytes == b && st->a[i].align == al;
  if (ok) {
    st->a[i].p = NULL;
    st->frees++, st->live--;
  } else {
    st->mismatches++;
  }
  pthread_mutex_unlock(&st->lock);
  if (!ok)
    return devmm_set_error(DEVMM_EINVAL, "strict: free(%p, %zu, %zu) matches no allocation", p, b,
                           al);
  free(p);
  return DEVMM_OK;
}

static devmm_resource *strict_create(strict *st, int refuse_above, int refusal) {
  static const devmm_resource_ops ops = {sizeof ops, strict_alloc, strict_free};
  memset(st, 0, sizeof *st);
  pthread_mutex_init(&st->lock, NULL);
  st->refuse_above = refuse_above, st->refusal = refusal;
  devmm_resource *r;
  devmm_device cpu = {DEVMM_DEVICE_CPU, 0};
  ck_assert_int_eq(devmm_resource_create(&ops, st, cpu, "strict", 0, &r), DEVMM_OK);
  return r;
}

/* Many over-allocated blocks (so that the adaptor's table has collisions), freed in another
 * order: each free reaches the upstream with exactly what was allocated. Both refusals the
 * adaptor works around (ENOTSUP, EINVAL) are tried; any other failure is passed on. */
START_TEST(aligned_frees_exactly_what_was_allocated) {
  static strict st;
  int refusal = _i ? DEVMM_EINVAL : DEVMM_ENOTSUP;
  devmm_resource *up = strict_create(&st, 16, refusal), *al;
  ck_assert_int_eq(devmm_aligned_adaptor_create(up, 256, 64, &al), DEVMM_OK);
  enum { N = 600 };
  static void *p[N];
  for (int i = 0; i < N; i++) {
    size_t n = 64 + (size_t)i;
    ck_assert_msg(devmm_allocate(al, n, 0, NULL, &p[i]) == DEVMM_OK, "%s", devmm_last_error());
    ck_assert_uint_eq((uintptr_t)p[i] % 256, 0);
    memset(p[i], 1, n);
  }
  void *small;
  ck_assert_int_eq(devmm_allocate(al, 10, 0, NULL, &small), DEVMM_OK); /* under the threshold */
  for (int i = N - 1; i >= 0; i -= 2)
    ck_assert_msg(devmm_deallocate(al, p[i], 64 + (size_t)i, 0, NULL) == DEVMM_OK, "%s",
                  devmm_last_error());
  for (int i = 0; i < N; i += 2)
    ck_assert_msg(devmm_deallocate(al, p[i], 64 + (size_t)i, 0, NULL) == DEVMM_OK, "%s",
                  devmm_last_error());
  ck_assert_int_eq(devmm_deallocate(al, small, 10, 0, NULL), DEVMM_OK);
  ck_assert_int_eq(st.mismatches, 0);
  ck_assert_int_eq(st.live, 0);
  ck_assert_int_eq(st.allocs, N + 1);
  /* a request that already asks for the alignment goes to the upstream as it is */
  ck_assert_int_eq(devmm_allocate(al, 100, 512, NULL, &small), refusal);
  ck_assert_error_contains("strict: alignment 512 refused");
  devmm_resource_release(al);
  /* an upstream that honours the alignment: asked for it, and freed with it */
  devmm_resource *up2 = strict_create(&st, 0, 0);
  ck_assert_int_eq(devmm_aligned_adaptor_create(up2, 256, 0, &al), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(al, 100, 0, NULL, &small), DEVMM_OK);
  ck_assert_uint_eq(st.a[0].align, 256);
  ck_assert_int_eq(devmm_deallocate(al, small, 100, 0, NULL), DEVMM_OK);
  ck_assert_int_eq(st.mismatches + st.live, 0);
  devmm_resource_release(al);
  devmm_resource_release(up2);
  /* any other failure is the answer, without over-allocating */
  devmm_resource *up3 = strict_create(&st, 16, DEVMM_ENOMEM);
  ck_assert_int_eq(devmm_aligned_adaptor_create(up3, 256, 0, &al), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(al, 100, 0, NULL, &small), DEVMM_ENOMEM);
  ck_assert_error_contains("strict: alignment 256 refused");
  ck_assert_int_eq(st.allocs, 0);
  devmm_resource_release(al);
  devmm_resource_release(up3);
  devmm_resource_release(up);
}
END_TEST

typedef struct {
  devmm_resource *r;
  int base;
} aligned_worker;

static void *aligned_churn(void *arg) {
  aligned_worker *w = arg;
  void *p[32];
  for (int round = 0; round < 300; round++) {
    for (int i = 0; i < 32; i++)
      ck_assert_int_eq(devmm_allocate(w->r, 100 + (size_t)(w->base + i), 0, NULL, &p[i]), 0);
    for (int i = 0; i < 32; i++)
      ck_assert_int_eq(devmm_deallocate(w->r, p[i], 100 + (size_t)(w->base + i), 0, NULL), 0);
  }
  return NULL;
}

/* Two threads over-allocating through one adaptor: its table stays consistent. */
START_TEST(aligned_two_threads) {
  static strict st;
  devmm_resource *up = strict_create(&st, 16, DEVMM_ENOTSUP), *al;
  ck_assert_int_eq(devmm_aligned_adaptor_create(up, 128, 0, &al), DEVMM_OK);
  pthread_t t[2];
  aligned_worker w[2] = {{al, 0}, {al, 1000}};
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, aligned_churn, &w[i]);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  ck_assert_int_eq(st.mismatches, 0);
  ck_assert_int_eq(st.live, 0);
  ck_assert_int_eq(st.allocs, 2 * 300 * 32);
  devmm_resource_release(al);
  devmm_resource_release(up);
}
END_TEST

START_TEST(aligned_bad_alignments) {
  devmm_resource *up = testres_create(NULL), *al = (devmm_resource *)1;
  size_t bad[] = {0, 3, 6, 12, 48, 96};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    al = (devmm_resource *)1;
    ck_assert_int_eq(devmm_aligned_adaptor_create(up, bad[i], 0, &al), DEVMM_EINVAL);
    char want[80];
    snprintf(want, sizeof want, "aligned adaptor: alignment %zu is not a power of two", bad[i]);
    ck_assert_error_contains(want);
    ck_assert_ptr_null(al); /* out is cleared on failure */
  }
  size_t good[] = {1, 2, 4096};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    ck_assert_int_eq(devmm_aligned_adaptor_create(up, good[i], 0, &al), DEVMM_OK);
    devmm_resource_release(al);
  }
  devmm_resource_release(up);
}
END_TEST

START_TEST(aligned_over_allocates_when_needed) {
  static const devmm_resource_ops ops = {sizeof ops, fixed_alloc, fixed_free};
  devmm_resource *fixed, *al;
  devmm_device cpu = {DEVMM_DEVICE_CPU, 0};
  ck_assert_int_eq(devmm_resource_create(&ops, NULL, cpu, "fixed", 0, &fixed), DEVMM_OK);
  ck_assert_int_eq(devmm_aligned_adaptor_create(fixed, 4096, 1000, &al), DEVMM_OK);
  void *big[8], *small;
  for (int i = 0; i < 8; i++) {
    ck_assert_int_eq(devmm_allocate(al, 5000, 0, NULL, &big[i]), DEVMM_OK);
    ck_assert_uint_eq((uintptr_t)big[i] % 4096, 0);
    memset(big[i], 0xab, 5000);
  }
  ck_assert_int_eq(devmm_allocate(al, 100, 0, NULL, &small), DEVMM_OK); /* under threshold */
  for (int i = 0; i < 8; i++)
    ck_assert_int_eq(devmm_deallocate(al, big[i], 5000, 0, NULL), DEVMM_OK);
  devmm_deallocate(al, small, 100, 0, NULL);
  devmm_resource_release(al);
  devmm_resource_release(fixed);
  /* with an upstream that can align itself, no over-allocation is needed */
  devmm_resource *up = testres_create(NULL);
  ck_assert_int_eq(devmm_aligned_adaptor_create(up, 256, 0, &al), DEVMM_OK);
  void *p;
  ck_assert_int_eq(devmm_allocate(al, 10, 0, NULL, &p), DEVMM_OK);
  ck_assert_uint_eq((uintptr_t)p % 256, 0);
  devmm_deallocate(al, p, 10, 0, NULL);
  devmm_resource_release(al);
  ck_assert_int_eq(devmm_aligned_adaptor_create(up, 48, 0, &al), DEVMM_EINVAL);
  ck_assert_error_contains("alignment 48 is not a power of two");
  devmm_resource_release(up);
}
END_TEST

Suite *aligned_suite(void) {
  Suite *s = suite_create("aligned");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, aligned_over_allocates_when_needed);
  tcase_add_loop_test(tc, aligned_frees_exactly_what_was_allocated, 0, 2);
  tcase_add_test(tc, aligned_two_threads);
  tcase_add_test(tc, aligned_bad_alignments);
  suite_add_tcase(s, tc);
  return s;
}
