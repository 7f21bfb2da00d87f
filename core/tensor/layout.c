/* The layout engine: strides, span and base alignment from a policy. Pure functions. */
#include "tensor_internal.h"

devmm_layout devmm_layout_row_major(void) {
  devmm_layout l = {DEVMM_LAYOUT_ROW_MAJOR, DEVMM_LAYOUT_ROW_MAJOR, 0, NULL, 0, 0};
  return l;
}

devmm_layout devmm_layout_column_major(void) {
  devmm_layout l = {DEVMM_LAYOUT_COLUMN_MAJOR, DEVMM_LAYOUT_COLUMN_MAJOR, 0, NULL, 0, 0};
  return l;
}

devmm_layout devmm_layout_strided(int ndim, const int64_t *strides) {
  devmm_layout l = {DEVMM_LAYOUT_STRIDED, DEVMM_LAYOUT_STRIDED, ndim, strides, 0, 0};
  return l;
}

devmm_layout devmm_layout_aligned(devmm_layout_kind inner, size_t unit_stride_alignment,
                                  size_t base_alignment) {
  devmm_layout l = {DEVMM_LAYOUT_ALIGNED, inner, 0, NULL, unit_stride_alignment, base_alignment};
  return l;
}

static int is_pow2(size_t x) { return x && !(x & (x - 1)); }

int devmm__count_elements(const char *who, int ndim, const int64_t *shape, size_t itemsize,
                          uint64_t *count) {
  int64_t n = 1, bytes;
  for (int i = 0; i < ndim; i++)
    if (__builtin_mul_overflow(n, shape[i], &n))
      return devmm_set_error(DEVMM_EOVERFLOW,
                             "%s: the number of elements overflows int64 at shape[%d] = %lld", who,
                             i, (long long)shape[i]);
  if (__builtin_mul_overflow(n, (int64_t)itemsize, &bytes))
    return devmm_set_error(DEVMM_EOVERFLOW,
                           "%s: %lld elements of %zu bytes: their size in bytes overflows int64",
                           who, (long long)n, itemsize);
  *count = (uint64_t)n;
  return DEVMM_OK;
}

/* Contiguous strides in the order given by `order` (indices from fastest to slowest), with the
 * unit-stride extent padded to `pad` elements (0: no padding). Zero extents count as 1 so the
 * strides stay meaningful, as numpy does. */
static int contiguous(int ndim, const int64_t *shape, int column_major, int64_t pad,
                      int64_t *strides, int64_t *outer_extent) {
  int64_t s = 1;
  for (int k = 0; k < ndim; k++) {
    int i = column_major ? k : ndim - 1 - k;
    strides[i] = s;
    int64_t ext = shape[i] ? shape[i] : 1;
    if (k == 0 && pad > 1)
      ext = (ext + pad - 1) / pad * pad;
    if (__builtin_mul_overflow(s, ext, &s))
      return devmm_set_error(DEVMM_EOVERFLOW,
                             "layout: the strides overflow int64 at dimension "
                             "%d (shape too large)",
                             i);
  }
  *outer_extent = s;
  return DEVMM_OK;
}

int devmm_layout_compute(const devmm_layout *layout, int ndim, const int64_t *shape,
                         size_t itemsize, int64_t *strides_out, devmm_layout_result *result) {
  if (!layout || !result || (ndim > 0 && (!shape || !strides_out)))
    return devmm_set_error(DEVMM_EINVAL, "devmm_layout_compute: layout, result, shape and "
                                         "strides must not be NULL");
  if (ndim < 0 || ndim > DEVMM_MAX_NDIM)
    return devmm_set_error(DEVMM_EINVAL, "layout: ndim %d out of range: expected 0..%d", ndim,
                           DEVMM_MAX_NDIM);
  if (itemsize == 0)
    return devmm_set_error(DEVMM_EINVAL, "layout: itemsize 0: expected a dtype of at least "
                                         "one byte (sub-byte dtypes cannot be laid out)");
  int64_t nelems = 1;
  int empty = 0;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0)
      return devmm_set_error(DEVMM_EINVAL,
                             "layout: shape[%d] = %lld is negative: expected "
                             "an extent >= 0",
                             i, (long long)shape[i]);
    if (shape[i] == 0)
      empty = 1;
    else if (__builtin_mul_overflow(nelems, shape[i], &nelems))
      return devmm_set_error(DEVMM_EOVERFLOW,
                             "layout: the number of elements overflows int64 "
                             "at shape[%d] = %lld",
                             i, (long long)shape[i]);
  }
  size_t base = itemsize;
  int64_t pad = 0, outer = 0;
  int colmajor = 0;
  switch (layout->kind) {
  case DEVMM_LAYOUT_ROW_MAJOR:
  case DEVMM_LAYOUT_COLUMN_MAJOR:
    colmajor = layout->kind == DEVMM_LAYOUT_COLUMN_MAJOR;
    break;
  case DEVMM_LAYOUT_ALIGNED: {
    size_t a = layout->unit_stride_alignment;
    if (layout->inner != DEVMM_LAYOUT_ROW_MAJOR && layout->inner != DEVMM_LAYOUT_COLUMN_MAJOR)
      return devmm_set_error(DEVMM_EINVAL,
                             "layout: Aligned needs RowMajor or ColumnMajor "
                             "as its inner layout (got kind %d)",
                             (int)layout->inner);
    if (!is_pow2(a) || a % itemsize)
      return devmm_set_error(DEVMM_EINVAL,
                             "layout: unit_stride_alignment %zu must be a "
                             "power of two and a multiple of the itemsize %zu",
                             a, itemsize);
    size_t b = layout->base_alignment ? layout->base_alignment : a;
    if (!is_pow2(b) || b % itemsize)
      return devmm_set_error(DEVMM_EINVAL,
                             "layout: base_alignment %zu must be a power of "
                             "two and a multiple of the itemsize %zu",
                             b, itemsize);
    base = b;
    colmajor = layout->inner == DEVMM_LAYOUT_COLUMN_MAJOR;
    if (ndim >= 2)
      pad = (int64_t)(a / itemsize);
    break;
  }
  case DEVMM_LAYOUT_STRIDED:
    if (layout->ndim != ndim || (ndim > 0 && !layout->strides))
      return devmm_set_error(DEVMM_EINVAL,
                             "layout: Strided has %d strides for a shape of "
                             "%d dimensions",
                             layout->ndim, ndim);
    {
      int64_t last = 0; /* offset of the last element, in elements */
      for (int i = 0; i < ndim; i++) {
        int64_t s = layout->strides[i], t;
        if (s < 0)
          return devmm_set_error(DEVMM_EINVAL,
                                 "layout: stride[%d] = %lld is negative: "
                                 "expected strides >= 0",
                                 i, (long long)s);
        strides_out[i] = s;
        if (shape[i] > 0 && (__builtin_mul_overflow(shape[i] - 1, s, &t) ||
                             __builtin_add_overflow(last, t, &last) || last == INT64_MAX))
          return devmm_set_error(DEVMM_EOVERFLOW,
                                 "layout: stride[%d] = %lld overflows the "
                                 "span",
                                 i, (long long)s);
      }
      outer = last + 1; /* last < INT64_MAX: checked above (suite layout: layout_bad_input) */
    }
    goto span;
  default:
    return devmm_set_error(DEVMM_EINVAL, "layout: unknown layout kind %d", (int)layout->kind);
  }
  {
    int rc = contiguous(ndim, shape, colmajor, pad, strides_out, &outer);
    if (rc)
      return rc;
  }
span:
  if (empty)
    outer = 0;
  if (__builtin_mul_overflow((uint64_t)outer, (uint64_t)itemsize, &result->span_bytes))
    return devmm_set_error(DEVMM_EOVERFLOW,
                           "layout: the span of %lld elements of %zu bytes "
                           "overflows size_t",
                           (long long)outer, itemsize);
  if (result->span_bytes > (size_t)INT64_MAX)
    return devmm_set_error(DEVMM_EOVERFLOW,
                           "layout: span of %zu bytes exceeds the largest "
                           "allocation (2^63-1 bytes)",
                           result->span_bytes);
  result->base_alignment = base;
  result->nelems = empty ? 0 : (size_t)nelems;
  return DEVMM_OK;
}
