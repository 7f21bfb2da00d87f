/* devmm — buffers (ref-counted allocations) and tensors (typed, shaped views of a buffer).
 *
 * A buffer's owner frees it with devmm_buffer_free(); the memory goes back to its resource
 * when the last exported view (DLPack) is released too. Freeing twice is harmless.
 *
 *   devmm_tensor *t; int64_t shape[2] = {2, 3};
 *   devmm_layout rm = devmm_layout_row_major();
 *   devmm_tensor_empty(NULL, (devmm_device){DEVMM_DEVICE_CPU, 0}, &rm, 2, shape, f32, NULL, &t);
 *   devmm_tensor_destroy(t);
 */
#ifndef DEVMM_TENSOR_H
#define DEVMM_TENSOR_H

#include "dtype.h"
#include "layout.h"
#include "resource.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct devmm_buffer devmm_buffer;
typedef struct devmm_tensor devmm_tensor;

/* Allocates nbytes from r; the buffer holds a reference to r. nbytes 0 gives ptr NULL. */
DEVMM_API int devmm_buffer_allocate(devmm_resource *r, size_t nbytes, size_t alignment,
                                    devmm_stream stream, devmm_buffer **out);
/* Adds a reference to the buffer object. */
DEVMM_API devmm_buffer *devmm_buffer_retain(devmm_buffer *b);
/* Drops a reference; the last one frees the memory (if the owner had not) and the object. */
DEVMM_API void devmm_buffer_release(devmm_buffer *b);
/* The owner gives the memory up: it returns to the resource now, or when the last export is
 * released. Idempotent: a second call does nothing. The object stays valid until released. */
DEVMM_API void devmm_buffer_free(devmm_buffer *b);
/* 1 once the owner has called devmm_buffer_free, else 0. */
DEVMM_API int devmm_buffer_is_freed(const devmm_buffer *b);
/* 1 while the memory is still allocated (owner or an export holds it), else 0. */
DEVMM_API int devmm_buffer_is_live(const devmm_buffer *b);
/* The allocation's address (NULL after free or for 0 bytes). */
DEVMM_API void *devmm_buffer_ptr(const devmm_buffer *b);
/* The allocation's size in bytes. */
DEVMM_API size_t devmm_buffer_nbytes(const devmm_buffer *b);
/* The resource the memory came from (borrowed). */
DEVMM_API devmm_resource *devmm_buffer_resource(const devmm_buffer *b);
/* The device of the allocation. */
DEVMM_API devmm_device devmm_buffer_device(const devmm_buffer *b);
/* The stream the allocation is ordered on. */
DEVMM_API devmm_stream devmm_buffer_stream(const devmm_buffer *b);
/* Takes an extra hold on the memory for an export (fails once the owner has freed it). */
DEVMM_API int devmm_buffer_acquire(devmm_buffer *b);
/* Drops a hold taken by devmm_buffer_acquire; safe on any thread. */
DEVMM_API void devmm_buffer_unacquire(devmm_buffer *b);
/* Hands the buffer to work on stream `consumer`: that work waits for the buffer's stream
 * (stream_wait), and the buffer's free is then deferred until the whole device is done
 * (consumer's work may be queued when it lets go). DEVMM_STREAM_ALL: a consumer on unknown
 * streams (DLPack's -1), nothing waits. A buffer on another thread's DEVMM_STREAM_PER_THREAD:
 * the caller waits for the whole device first (ADR 38). */
DEVMM_API int devmm_buffer_stream_wait(devmm_buffer *b, devmm_stream consumer);
/* Prefetches the buffer's memory to device (its own, the one its resource moves memory to:
 * cuda:0 for cuda_managed:0), ordered on stream (devmm_prefetch); DEVMM_ENOTSUP, saying so, where
 * the memory does not move (whatever device); DEVMM_EINVAL for another device; DEVMM_ESTATE once
 * freed. */
DEVMM_API int devmm_buffer_prefetch(devmm_buffer *b, devmm_device device, devmm_stream stream);
/* Frees that must come after consumers' streams (memory handed to other streams, or released
 * by its last consumer after the owner) are done by a background thread once the device is
 * idle, and never while a graph capture devmm sees is underway (ADR 38); this waits until every
 * one queued so far is done (so not from inside a capture: it would wait for its end). */
DEVMM_API void devmm_deferred_frees_wait(void);

/* Creates a tensor view of buf (retained): every element must lie inside the buffer; a freed
 * buffer is DEVMM_ESTATE. */
DEVMM_API int devmm_tensor_create(devmm_buffer *buf, devmm_dtype dtype, int ndim,
                                  const int64_t *shape, const int64_t *strides, size_t byte_offset,
                                  int readonly, devmm_tensor **out);
/* The base alignment devmm_tensor_empty gives a tensor with elements when its layout asks for
 * less (ADR 13): 256 bytes on CUDA, ROCm, managed and simulated device memory (what
 * cudaMalloc/hipMalloc guarantee), 64 elsewhere (the CPU and pinned host memory: what
 * PyTorch's CPU allocator gives and what XLA needs to import without a copy). */
DEVMM_API size_t devmm_tensor_default_alignment(devmm_device device);
/* Lays out shape with layout, allocates from r (NULL: the device's current resource) aligned
 * to the larger of the layout's base alignment and devmm_tensor_default_alignment (the
 * layout's alone when r refuses the default with DEVMM_ENOTSUP), and returns a tensor owning a
 * new buffer: the whole hot path of devmm.empty in one call. */
DEVMM_API int devmm_tensor_empty(devmm_resource *r, devmm_device device, const devmm_layout *layout,
                                 int ndim, const int64_t *shape, devmm_dtype dtype,
                                 devmm_stream stream, devmm_tensor **out);
/* Destroys the tensor object (drops its buffer reference; does not free the buffer). */
DEVMM_API void devmm_tensor_destroy(devmm_tensor *t);
/* The tensor's buffer (borrowed). */
DEVMM_API devmm_buffer *devmm_tensor_buffer(const devmm_tensor *t);
/* Number of dimensions. */
DEVMM_API int devmm_tensor_ndim(const devmm_tensor *t);
/* Shape (ndim entries, borrowed). */
DEVMM_API const int64_t *devmm_tensor_shape(const devmm_tensor *t);
/* Strides in elements (ndim entries, borrowed). */
DEVMM_API const int64_t *devmm_tensor_strides(const devmm_tensor *t);
/* Element type. */
DEVMM_API devmm_dtype devmm_tensor_dtype(const devmm_tensor *t);
/* Byte offset of element 0 inside the buffer. */
DEVMM_API size_t devmm_tensor_byte_offset(const devmm_tensor *t);
/* Address of element 0 (buffer address + offset; NULL after free or for size 0). */
DEVMM_API void *devmm_tensor_data(const devmm_tensor *t);
/* 1 if the tensor is read-only. */
DEVMM_API int devmm_tensor_readonly(const devmm_tensor *t);
/* Number of elements. */
DEVMM_API size_t devmm_tensor_size(const devmm_tensor *t);
/* Fills the tensor's whole buffer with zero bytes through its resource's memset op, on the
 * buffer's stream; host-accessible memory is synchronised before returning. */
DEVMM_API int devmm_tensor_zero(devmm_tensor *t);

/* Copies t's elements into a new compact row-major tensor allocated from dst: padding is
 * dropped. The copy goes through a resource that can address both sides (the device side's
 * for host <-> device, the source's otherwise), ordered after both buffers' streams, and is
 * complete when this returns; devices of two different runtimes fail with DEVMM_ENOTSUP. */
DEVMM_API int devmm_tensor_copy(const devmm_tensor *t, devmm_resource *dst, devmm_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
