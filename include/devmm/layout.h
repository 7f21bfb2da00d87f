/* devmm — the layout engine: pure functions from (policy, shape, itemsize) to strides (in
 * elements), span (bytes to allocate) and the required base alignment.
 *
 *   devmm_layout l = devmm_layout_aligned(DEVMM_LAYOUT_ROW_MAJOR, 128, 256);
 *   int64_t shape[2] = {4, 3}, strides[2]; devmm_layout_result r;
 *   devmm_layout_compute(&l, 2, shape, 4, strides, &r);  // strides {32,1}, span 512, align 256
 */
#ifndef DEVMM_LAYOUT_H
#define DEVMM_LAYOUT_H

#include "export.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DEVMM_MAX_NDIM 32

typedef enum devmm_layout_kind {
  DEVMM_LAYOUT_ROW_MAJOR = 0,
  DEVMM_LAYOUT_COLUMN_MAJOR = 1,
  DEVMM_LAYOUT_STRIDED = 2,
  DEVMM_LAYOUT_ALIGNED = 3,
} devmm_layout_kind;

/* A layout policy. Build it with the helpers below; `strides` is borrowed, not copied. */
typedef struct devmm_layout {
  devmm_layout_kind kind;
  devmm_layout_kind inner;      /* ALIGNED: ROW_MAJOR or COLUMN_MAJOR */
  int ndim;                     /* STRIDED: number of strides */
  const int64_t *strides;       /* STRIDED: strides in elements (>= 0) */
  size_t unit_stride_alignment; /* ALIGNED: bytes each row/column starts on */
  size_t base_alignment;        /* ALIGNED: bytes the base pointer is aligned to (0: same) */
} devmm_layout;

typedef struct devmm_layout_result {
  size_t span_bytes;     /* bytes to allocate (0 for a tensor with a zero-sized dimension) */
  size_t base_alignment; /* alignment the allocation must have, in bytes */
  size_t nelems;         /* logical number of elements */
} devmm_layout_result;

/* Row-major (C order) policy. */
DEVMM_API devmm_layout devmm_layout_row_major(void);
/* Column-major (Fortran order) policy. */
DEVMM_API devmm_layout devmm_layout_column_major(void);
/* Explicit strides in elements (borrowed pointer; must stay valid while the layout is used). */
DEVMM_API devmm_layout devmm_layout_strided(int ndim, const int64_t *strides);
/* Padded policy: each row (row-major) or column (column-major) starts on unit_stride_alignment. */
DEVMM_API devmm_layout devmm_layout_aligned(devmm_layout_kind inner, size_t unit_stride_alignment,
                                            size_t base_alignment);
/* Computes strides_out[ndim] (elements) and *result; every product is overflow-checked. */
DEVMM_API int devmm_layout_compute(const devmm_layout *layout, int ndim, const int64_t *shape,
                                   size_t itemsize, int64_t *strides_out,
                                   devmm_layout_result *result);

#ifdef __cplusplus
}
#endif
#endif
