/* Suite layout: the layout engine against a table and random shapes checked by a brute-force
 * enumeration of every element; bad input. */
#include <check.h>
#include <stdlib.h>

#include "testres.h"

static int64_t sh[DEVMM_MAX_NDIM], st[DEVMM_MAX_NDIM];

/* Brute force: visit every element, check it lies inside the span, that no two elements share
 * an address, that rows/columns start on the unit-stride alignment, and that a contiguous
 * layout enumerates addresses in its own order exactly (C order or Fortran order). */
static void brute_force(const devmm_layout *l, int ndim, const int64_t *shape, size_t itemsize,
                        const int64_t *strides, const devmm_layout_result *r) {
  size_t n = 1;
  for (int i = 0; i < ndim; i++)
    n *= (size_t)shape[i];
  ck_assert_uint_eq(r->nelems, n);
  if (n == 0) {
    ck_assert_uint_eq(r->span_bytes, 0);
    return;
  }
  size_t span_elems = r->span_bytes / itemsize;
  char *seen = calloc(span_elems, 1);
  int64_t idx[DEVMM_MAX_NDIM] = {0};
  int colmajor = l->kind == DEVMM_LAYOUT_COLUMN_MAJOR ||
                 (l->kind == DEVMM_LAYOUT_ALIGNED && l->inner == DEVMM_LAYOUT_COLUMN_MAJOR);
  int64_t prev = -1;
  for (size_t k = 0; k < n; k++) {
    int64_t off = 0;
    for (int i = 0; i < ndim; i++)
      off += idx[i] * strides[i];
    ck_assert_int_ge(off, 0);
    ck_assert_int_lt(off, (int64_t)span_elems);
    if (l->kind != DEVMM_LAYOUT_STRIDED) {
      ck_assert_msg(!seen[off], "two elements share offset %lld", (long long)off);
      ck_assert_int_gt(off, prev); /* enumeration order == memory order */
      prev = off;
    }
    seen[off] = 1;
    if (l->kind == DEVMM_LAYOUT_ALIGNED && ndim >= 2) {
      int unit = colmajor ? 0 : ndim - 1;
      if (idx[unit] == 0)
        ck_assert_uint_eq(((size_t)off * itemsize) % l->unit_stride_alignment, 0);
    }
    if (l->kind == DEVMM_LAYOUT_ROW_MAJOR || l->kind == DEVMM_LAYOUT_COLUMN_MAJOR)
      ck_assert_int_eq(off, (int64_t)k); /* dense: the k-th element is at k */
    /* advance the multi-index in memory order */
    for (int d = 0; d < ndim; d++) {
      int i = colmajor ? d : ndim - 1 - d;
      if (++idx[i] < shape[i])
        break;
      idx[i] = 0;
    }
  }
  /* the span is tight: the last element of the padded block is the end of the span */
  if (l->kind != DEVMM_LAYOUT_ALIGNED) {
    int64_t last = 0;
    for (int i = 0; i < ndim; i++)
      last += (shape[i] - 1) * strides[i];
    ck_assert_int_eq(last + 1, (int64_t)span_elems);
  }
  free(seen);
}

typedef struct {
  int kind, inner, ndim;
  int64_t shape[4];
  size_t itemsize, usa, base;
  int64_t strides[4];
  size_t span, align;
} layout_case;

static const layout_case cases[] = {
    /* kind, inner, ndim, shape, itemsize, usa, base, expected strides, span, align */
    {DEVMM_LAYOUT_ROW_MAJOR, 0, 2, {2, 3}, 4, 0, 0, {3, 1}, 24, 4},
    {DEVMM_LAYOUT_COLUMN_MAJOR, 0, 2, {2, 3}, 4, 0, 0, {1, 2}, 24, 4},
    {DEVMM_LAYOUT_ROW_MAJOR, 0, 3, {2, 3, 4}, 8, 0, 0, {12, 4, 1}, 192, 8},
    {DEVMM_LAYOUT_COLUMN_MAJOR, 0, 3, {2, 3, 4}, 2, 0, 0, {1, 2, 6}, 48, 2},
    {DEVMM_LAYOUT_ALIGNED, DEVMM_LAYOUT_ROW_MAJOR, 2, {4, 3}, 4, 128, 256, {32, 1}, 512, 256},
    {DEVMM_LAYOUT_ALIGNED, DEVMM_LAYOUT_COLUMN_MAJOR, 2, {4, 3}, 4, 128, 0, {1, 32}, 384, 128},
    {DEVMM_LAYOUT_ALIGNED, DEVMM_LAYOUT_ROW_MAJOR, 3, {2, 3, 5}, 8, 64, 0, {24, 8, 1}, 384, 64},
    {DEVMM_LAYOUT_ALIGNED, DEVMM_LAYOUT_ROW_MAJOR, 2, {3, 32}, 4, 128, 0, {32, 1}, 384, 128},
    {DEVMM_LAYOUT_ALIGNED, DEVMM_LAYOUT_ROW_MAJOR, 2, {3, 33}, 4, 128, 0, {64, 1}, 768, 128},
    {DEVMM_LAYOUT_ALIGNED, DEVMM_LAYOUT_ROW_MAJOR, 1, {5}, 4, 128, 0, {1}, 20, 128},
    {DEVMM_LAYOUT_ALIGNED, DEVMM_LAYOUT_ROW_MAJOR, 0, {0}, 4, 128, 0, {0}, 4, 128},
    {DEVMM_LAYOUT_ROW_MAJOR, 0, 0, {0}, 8, 0, 0, {0}, 8, 8},
    {DEVMM_LAYOUT_ROW_MAJOR, 0, 2, {0, 3}, 4, 0, 0, {3, 1}, 0, 4},
    {DEVMM_LAYOUT_ROW_MAJOR, 0, 2, {3, 0}, 4, 0, 0, {1, 1}, 0, 4},
    {DEVMM_LAYOUT_ROW_MAJOR, 0, 1, {7}, 1, 0, 0, {1}, 7, 1},
    {DEVMM_LAYOUT_STRIDED, 0, 2, {2, 3}, 4, 0, 0, {10, 2}, 60, 4},
    {DEVMM_LAYOUT_STRIDED, 0, 2, {2, 3}, 4, 0, 0, {0, 1}, 12, 4},
    {DEVMM_LAYOUT_ROW_MAJOR, 0, 4, {2, 1, 3, 2}, 16, 0, 0, {6, 6, 2, 1}, 192, 16},
};

START_TEST(layout_table) {
  const layout_case *c = &cases[_i];
  devmm_layout l;
  if (c->kind == DEVMM_LAYOUT_ALIGNED)
    l = devmm_layout_aligned(c->inner, c->usa, c->base);
  else if (c->kind == DEVMM_LAYOUT_STRIDED)
    l = devmm_layout_strided(c->ndim, c->strides);
  else
    l = c->kind == DEVMM_LAYOUT_ROW_MAJOR ? devmm_layout_row_major() : devmm_layout_column_major();
  devmm_layout_result r;
  int64_t strides[4];
  ck_assert_msg(devmm_layout_compute(&l, c->ndim, c->shape, c->itemsize, strides, &r) == 0,
                "case %d: %s", _i, devmm_last_error());
  for (int i = 0; i < c->ndim; i++)
    ck_assert_msg(strides[i] == c->strides[i], "case %d: stride %d is %lld, expected %lld", _i, i,
                  (long long)strides[i], (long long)c->strides[i]);
  ck_assert_uint_eq(r.span_bytes, c->span);
  ck_assert_uint_eq(r.base_alignment, c->align);
  brute_force(&l, c->ndim, c->shape, c->itemsize, strides, &r);
}
END_TEST

/* Random shapes against the brute force (seeded, so failures reproduce). */
START_TEST(layout_random_vs_brute_force) {
  unsigned seed = 12345;
  for (int iter = 0; iter < 3000; iter++) {
    int ndim = rand_r(&seed) % 5;
    for (int i = 0; i < ndim; i++)
      sh[i] = rand_r(&seed) % 6;
    size_t items[] = {1, 2, 4, 8, 16};
    size_t itemsize = items[rand_r(&seed) % 5];
    devmm_layout l;
    int k = rand_r(&seed) % 4;
    if (k == 0)
      l = devmm_layout_row_major();
    else if (k == 1)
      l = devmm_layout_column_major();
    else {
      size_t usa = itemsize << (rand_r(&seed) % 5);
      l = devmm_layout_aligned(k == 2 ? DEVMM_LAYOUT_ROW_MAJOR : DEVMM_LAYOUT_COLUMN_MAJOR, usa, 0);
    }
    devmm_layout_result r;
    ck_assert_int_eq(devmm_layout_compute(&l, ndim, sh, itemsize, st, &r), DEVMM_OK);
    brute_force(&l, ndim, sh, itemsize, st, &r);
  }
}
END_TEST

START_TEST(layout_bad_input) {
  devmm_layout rm = devmm_layout_row_major();
  devmm_layout_result r;
  int64_t neg[2] = {2, -3};
  ck_assert_int_eq(devmm_layout_compute(&rm, 2, neg, 4, st, &r), DEVMM_EINVAL);
  ck_assert_error_contains("shape[1] = -3 is negative");
  int64_t huge[3] = {INT64_MAX / 2, 3, 1};
  ck_assert_int_eq(devmm_layout_compute(&rm, 3, huge, 4, st, &r), DEVMM_EOVERFLOW);
  ck_assert_error_contains("overflows");
  int64_t big[1] = {INT64_MAX / 2};
  ck_assert_int_eq(devmm_layout_compute(&rm, 1, big, 8, st, &r), DEVMM_EOVERFLOW);
  ck_assert_error_contains("span");
  int64_t ok[2] = {4, 3};
  /* rows padded to 2^60 elements: 8 of them overflow the strides */
  devmm_layout a = devmm_layout_aligned(DEVMM_LAYOUT_ROW_MAJOR, (size_t)1 << 62, 0);
  int64_t tall[2] = {8, 3};
  ck_assert_int_eq(devmm_layout_compute(&a, 2, tall, 4, st, &r), DEVMM_EOVERFLOW);
  ck_assert_error_contains("layout: the strides overflow int64 at dimension 0 (shape too large)");
  a = devmm_layout_aligned(DEVMM_LAYOUT_ROW_MAJOR, 96, 0);
  ck_assert_int_eq(devmm_layout_compute(&a, 2, ok, 4, st, &r), DEVMM_EINVAL);
  ck_assert_error_contains("unit_stride_alignment 96 must be a power of two");
  a = devmm_layout_aligned(DEVMM_LAYOUT_ROW_MAJOR, 4, 0);
  ck_assert_int_eq(devmm_layout_compute(&a, 2, ok, 8, st, &r), DEVMM_EINVAL);
  ck_assert_error_contains("multiple of the itemsize 8");
  a = devmm_layout_aligned(DEVMM_LAYOUT_ROW_MAJOR, 128, 100);
  ck_assert_int_eq(devmm_layout_compute(&a, 2, ok, 4, st, &r), DEVMM_EINVAL);
  ck_assert_error_contains("base_alignment 100");
  a = devmm_layout_aligned(DEVMM_LAYOUT_STRIDED, 128, 0);
  ck_assert_int_eq(devmm_layout_compute(&a, 2, ok, 4, st, &r), DEVMM_EINVAL);
  ck_assert_error_contains("RowMajor or ColumnMajor");
  int64_t s1[1] = {1};
  devmm_layout s = devmm_layout_strided(1, s1);
  ck_assert_int_eq(devmm_layout_compute(&s, 2, ok, 4, st, &r), DEVMM_EINVAL);
  ck_assert_error_contains("1 strides for a shape of 2 dimensions");
  int64_t sneg[2] = {3, -1};
  s = devmm_layout_strided(2, sneg);
  ck_assert_int_eq(devmm_layout_compute(&s, 2, ok, 4, st, &r), DEVMM_EINVAL);
  ck_assert_error_contains("stride[1] = -1 is negative");
  int64_t sbig[2] = {INT64_MAX / 2, 1};
  s = devmm_layout_strided(2, sbig);
  ck_assert_int_eq(devmm_layout_compute(&s, 2, ok, 4, st, &r), DEVMM_EOVERFLOW);
  ck_assert_error_contains("stride[0]");
  /* the last element at offset INT64_MAX: its span (one more) does not fit (make fuzz found this
   * as a signed overflow, docs/reliability.md) */
  int64_t two[1] = {2}, smax[1] = {INT64_MAX};
  s = devmm_layout_strided(1, smax);
  ck_assert_int_eq(devmm_layout_compute(&s, 1, two, 1, st, &r), DEVMM_EOVERFLOW);
  ck_assert_error_contains("stride[0] = 9223372036854775807 overflows the span");
  ck_assert_int_eq(devmm_layout_compute(&rm, 33, ok, 4, st, &r), DEVMM_EINVAL);
  ck_assert_error_contains("ndim 33 out of range");
  ck_assert_int_eq(devmm_layout_compute(&rm, 2, ok, 0, st, &r), DEVMM_EINVAL);
  ck_assert_error_contains("itemsize 0");
  ck_assert_int_eq(devmm_layout_compute(NULL, 2, ok, 4, st, &r), DEVMM_EINVAL);
  ck_assert_error_contains("must not be NULL");
  devmm_layout bad = rm;
  bad.kind = (devmm_layout_kind)77;
  ck_assert_int_eq(devmm_layout_compute(&bad, 2, ok, 4, st, &r), DEVMM_EINVAL);
  ck_assert_error_contains("unknown layout kind 77");
}
END_TEST

Suite *layout_suite(void) {
  Suite *s = suite_create("layout");
  TCase *tc = tcase_create("core");
  tcase_add_loop_test(tc, layout_table, 0, (int)(sizeof cases / sizeof cases[0]));
  tcase_add_test(tc, layout_random_vs_brute_force);
  tcase_add_test(tc, layout_bad_input);
  tcase_set_timeout(tc, 60);
  suite_add_tcase(s, tc);
  return s;
}
