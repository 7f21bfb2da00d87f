/* libFuzzer target: the layout engine against its invariants. From random policies, shapes,
 * strides and alignments: either a clear error, or strides whose every element lies inside the
 * span, rows/columns on the unit-stride alignment, and a power-of-two base alignment that is a
 * multiple of the itemsize. Small tensors are also checked element by element. */
#include <devmm/devmm.h>

#include <stdlib.h>
#include <string.h>

static uint64_t take(const uint8_t **p, size_t *n, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes && *n; i++, (*p)++, (*n)--)
    v = v << 8 | **p;
  return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *p = data;
  size_t n = size;
  int kind = (int)(take(&p, &n, 1) % 5);
  int ndim = (int)(take(&p, &n, 1) % 6);
  size_t itemsize = (size_t)1 << (take(&p, &n, 1) % 5);
  int64_t shape[8], given[8], strides[8];
  for (int i = 0; i < ndim; i++) {
    int wide = (int)(take(&p, &n, 1) % 8) == 0; /* sometimes huge, to reach the overflow checks */
    shape[i] = (int64_t)take(&p, &n, wide ? 8 : 1);
    given[i] = (int64_t)take(&p, &n, wide ? 8 : 1);
  }
  size_t usa = (size_t)take(&p, &n, 2), base = (size_t)take(&p, &n, 2);
  devmm_layout l;
  switch (kind) {
  case 0:
    l = devmm_layout_row_major();
    break;
  case 1:
    l = devmm_layout_column_major();
    break;
  case 2:
    l = devmm_layout_strided(ndim, given);
    break;
  default:
    l = devmm_layout_aligned(kind == 3 ? DEVMM_LAYOUT_ROW_MAJOR : DEVMM_LAYOUT_COLUMN_MAJOR, usa,
                             base);
  }
  devmm_layout_result r;
  int rc = devmm_layout_compute(&l, ndim, shape, itemsize, strides, &r);
  if (rc != DEVMM_OK) {
    if ((rc != DEVMM_EINVAL && rc != DEVMM_EOVERFLOW) || !*devmm_last_error())
      abort();
    return 0;
  }
  if (!r.base_alignment || (r.base_alignment & (r.base_alignment - 1)) ||
      r.base_alignment % itemsize)
    abort();
  if (r.nelems == 0) {
    if (r.span_bytes != 0)
      abort();
    return 0;
  }
  /* the last element (all indices at their maximum) must lie inside the span */
  unsigned __int128 last = 0, nel = 1;
  for (int i = 0; i < ndim; i++) {
    if (strides[i] < 0)
      abort();
    last += (unsigned __int128)(shape[i] - 1) * (uint64_t)strides[i];
    nel *= (uint64_t)shape[i];
  }
  if ((last + 1) * itemsize > r.span_bytes || nel != r.nelems)
    abort();
  if (kind >= 3 && ndim >= 2) {
    int unit = kind == 3 ? ndim - 1 : 0;
    for (int i = 0; i < ndim; i++)
      if (i != unit && ((uint64_t)strides[i] * itemsize) % usa)
        abort(); /* every row/column starts on the unit-stride alignment */
  }
  if (kind != 2 && r.nelems <= 4096) { /* contiguous policies never overlap */
    char *seen = calloc(r.span_bytes / itemsize, 1);
    int64_t idx[8] = {0};
    for (size_t k = 0; k < r.nelems; k++) {
      int64_t off = 0;
      for (int i = 0; i < ndim; i++)
        off += idx[i] * strides[i];
      if (seen[off]++)
        abort();
      for (int i = 0; i < ndim && ++idx[i] == shape[i]; i++)
        idx[i] = 0;
    }
    free(seen);
  }
  return 0;
}
