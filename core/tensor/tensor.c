/* Tensors: a shape, strides, a dtype and a byte offset over a buffer (buffer.c), and the
 * default alignment of their memory (ADR 13). */
#include "tensor_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

int devmm_tensor_create(devmm_buffer *buf, devmm_dtype dtype, int ndim, const int64_t *shape,
                        const int64_t *strides, size_t byte_offset, int readonly,
                        devmm_tensor **out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_tensor_create: out is NULL");
  *out = NULL;
  if (!buf)
    return devmm_set_error(DEVMM_EINVAL, "devmm_tensor_create: buffer is NULL");
  if (devmm_buffer_is_freed(buf)) /* a view of it would be freed from the start */
    return devmm_set_error(DEVMM_ESTATE,
                           "tensor: buffer of %zu bytes was freed: expected a live buffer to "
                           "view",
                           buf->nbytes);
  if (ndim < 0 || ndim > DEVMM_MAX_NDIM)
    return devmm_set_error(DEVMM_EINVAL, "tensor: ndim %d out of range: expected 0..%d", ndim,
                           DEVMM_MAX_NDIM);
  if (ndim > 0 && (!shape || !strides))
    return devmm_set_error(DEVMM_EINVAL, "tensor: shape and strides must not be NULL");
  size_t itemsize = devmm_dtype_itemsize(dtype);
  if (!itemsize)
    return devmm_set_error(DEVMM_EINVAL,
                           "tensor: dtype {code=%u, bits=%u, lanes=%u} is "
                           "unknown or sub-byte",
                           dtype.code, dtype.bits, dtype.lanes);
  /* The last byte touched must lie inside the buffer. */
  int empty = 0;
  uint64_t last = 0, t, count;
  for (int i = 0; i < ndim; i++)
    if (shape[i] < 0 || strides[i] < 0)
      return devmm_set_error(DEVMM_EINVAL,
                             "tensor: shape[%d] = %lld and strides[%d] = %lld "
                             "must be >= 0",
                             i, (long long)shape[i], i, (long long)strides[i]);
  /* a stride-0 view may name more elements than memory has: never more than int64 counts */
  int rc = devmm__count_elements("tensor", ndim, shape, itemsize, &count);
  if (rc)
    return rc;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] == 0)
      empty = 1;
    else if (__builtin_mul_overflow((uint64_t)(shape[i] - 1), (uint64_t)strides[i], &t) ||
             __builtin_add_overflow(last, t, &last))
      return devmm_set_error(DEVMM_EOVERFLOW, "tensor: extent overflows at dimension %d", i);
  }
  uint64_t end;
  if (!empty &&
      (__builtin_add_overflow(last, 1, &end) || __builtin_mul_overflow(end, itemsize, &end) ||
       __builtin_add_overflow(end, byte_offset, &end) || end > buf->nbytes))
    return devmm_set_error(DEVMM_EINVAL,
                           "tensor: the view (offset %zu, last element %llu of "
                           "%zu bytes) does not fit in the buffer of %zu bytes",
                           byte_offset, (unsigned long long)last, itemsize, buf->nbytes);
  devmm_tensor *tn = malloc(sizeof *tn + 2 * (size_t)ndim * sizeof(int64_t));
  if (!tn)
    return devmm_set_error(DEVMM_ENOMEM, "tensor: out of host memory");
  tn->buffer = devmm_buffer_retain(buf);
  tn->byte_offset = byte_offset;
  tn->dtype = dtype;
  tn->ndim = ndim;
  tn->readonly = readonly != 0;
  if (ndim) {
    memcpy(tn->dims, shape, (size_t)ndim * sizeof(int64_t));
    memcpy(tn->dims + ndim, strides, (size_t)ndim * sizeof(int64_t));
  }
  *out = tn;
  return DEVMM_OK;
}

int devmm__tensor_buffer(devmm_resource *r, size_t span, size_t alignment, devmm_stream stream,
                         devmm_buffer **out) {
  /* an alignment that is no power of two goes as it is: the resource says what is wrong */
  size_t dflt =
      span && !(alignment & (alignment - 1)) ? devmm_tensor_default_alignment(r->device) : 0;
  int rc = devmm_buffer_allocate(r, span, dflt > alignment ? dflt : alignment, stream, out);
  if (rc == DEVMM_ENOTSUP && dflt > alignment) /* it cannot align that far: its own will do */
    rc = devmm_buffer_allocate(r, span, alignment, stream, out);
  return rc;
}

int devmm_tensor_empty(devmm_resource *r, devmm_device device, const devmm_layout *layout, int ndim,
                       const int64_t *shape, devmm_dtype dtype, devmm_stream stream,
                       devmm_tensor **out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_tensor_empty: out is NULL");
  *out = NULL;
  size_t itemsize = devmm_dtype_itemsize(dtype);
  if (!itemsize)
    return devmm_set_error(DEVMM_EINVAL,
                           "tensor: dtype {code=%u, bits=%u, lanes=%u} is "
                           "unknown or sub-byte (cannot be allocated)",
                           dtype.code, dtype.bits, dtype.lanes);
  devmm_layout rm;
  if (!layout) {
    rm = devmm_layout_row_major();
    layout = &rm;
  }
  int64_t strides[DEVMM_MAX_NDIM];
  devmm_layout_result lr;
  int rc = devmm_layout_compute(layout, ndim, shape, itemsize, strides, &lr);
  if (rc)
    return rc;
  devmm_resource *cur = NULL;
  if (!r) {
    if ((rc = devmm_get_current_resource(device, &cur)) != 0)
      return rc;
    r = cur;
  }
  devmm_buffer *b;
  rc = devmm__tensor_buffer(r, lr.span_bytes, lr.base_alignment > itemsize ? lr.base_alignment : 0,
                            stream, &b);
  devmm_resource_release(cur);
  if (rc)
    return rc;
  rc = devmm_tensor_create(b, dtype, ndim, shape, strides, 0, 0, out);
  devmm_buffer_release(b); /* the tensor holds it now (or it is freed on failure) */
  return rc;
}

size_t devmm_tensor_default_alignment(devmm_device device) {
  switch (device.device_type) {
  case DEVMM_DEVICE_CUDA:
  case DEVMM_DEVICE_ROCM:
  case DEVMM_DEVICE_CUDA_MANAGED:
  case DEVMM_DEVICE_SIM: /* the simulator stands in for a GPU: the same alignment */
  case DEVMM_DEVICE_SIM_MANAGED:
    return 256;
  default:
    return 64;
  }
}

void devmm_tensor_destroy(devmm_tensor *t) {
  if (t) {
    devmm_buffer_release(t->buffer);
    free(t);
  }
}

devmm_buffer *devmm_tensor_buffer(const devmm_tensor *t) { return t ? t->buffer : NULL; }
int devmm_tensor_ndim(const devmm_tensor *t) { return t ? t->ndim : 0; }
const int64_t *devmm_tensor_shape(const devmm_tensor *t) { return t ? t->dims : NULL; }
const int64_t *devmm_tensor_strides(const devmm_tensor *t) { return t ? t->dims + t->ndim : NULL; }
devmm_dtype devmm_tensor_dtype(const devmm_tensor *t) {
  devmm_dtype none = {0, 0, 0};
  return t ? t->dtype : none;
}
size_t devmm_tensor_byte_offset(const devmm_tensor *t) { return t ? t->byte_offset : 0; }
void *devmm_tensor_data(const devmm_tensor *t) {
  char *p = t ? devmm_buffer_ptr(t->buffer) : NULL;
  return p && devmm_tensor_size(t) ? p + t->byte_offset : NULL;
}
int devmm_tensor_readonly(const devmm_tensor *t) { return t ? t->readonly : 0; }
size_t devmm_tensor_size(const devmm_tensor *t) {
  if (!t)
    return 0;
  size_t n = 1; /* cannot wrap: devmm_tensor_create checked the count (devmm__count_elements) */
  for (int i = 0; i < t->ndim; i++)
    n *= (size_t)t->dims[i];
  return n;
}

int devmm_tensor_zero(devmm_tensor *t) {
  if (!t)
    return devmm_set_error(DEVMM_EINVAL, "devmm_tensor_zero: tensor is NULL");
  devmm_buffer *b = t->buffer;
  if (devmm_buffer_is_freed(b))
    return devmm_set_error(DEVMM_ESTATE, "tensor: its buffer was freed");
  int rc = devmm_memset(b->resource, b->ptr, 0, b->nbytes, b->stream);
  /* the host may read host-accessible memory (pinned, managed) right away: the memset, queued
   * on the buffer's stream, must be done first; device memory is read in stream order */
  if (rc == DEVMM_OK && (devmm_resource_flags(b->resource) & DEVMM_RESOURCE_HOST_ACCESSIBLE))
    rc = devmm_synchronize(b->resource, b->stream);
  return rc;
}
