/* core/tensor: element types (dtype.c), the layout engine (layout.c), buffers with two counts
 * and deferred frees (buffer.c), tensors (tensor.c) and copies between resources (copy.c). Uses
 * core/resource and core/base. */
#ifndef DEVMM_TENSOR_INTERNAL_H
#define DEVMM_TENSOR_INTERNAL_H

#include "../resource/resource_internal.h"

/* buffer.c: the buffer (see the head of buffer.c for its two counts and its streams). */
struct devmm_buffer {
  atomic_long refs;
  atomic_long holds;
  atomic_int owner; /* 1 until the owner calls devmm_buffer_free */
  devmm_device device;
  void *ptr;
  size_t nbytes, alignment;
  devmm_resource *resource;
  devmm_stream stream;
  atomic_int foreign; /* handed to a consumer stream other than `stream` */
  uint64_t thread;    /* stream DEVMM_STREAM_PER_THREAD: the allocating thread's id (ADR 38) */
  unsigned forks;     /* the process's fork count when allocated: another is the parent's */
};

/* tensor.c: a tensor over a buffer. */
struct devmm_tensor {
  devmm_buffer *buffer;
  size_t byte_offset;
  devmm_dtype dtype;
  int32_t ndim;
  int32_t readonly;
  int64_t dims[]; /* shape[ndim] then strides[ndim] */
};

/* layout.c: the elements of a shape (ndim extents, each >= 0), with no wrap (ADR 40): DEVMM_OK
 * with *count, or DEVMM_EOVERFLOW with the message (prefixed with who) when the count or its
 * bytes (count * itemsize) exceed int64, as a stride-0 view of 2^32 x 2^32 elements would. */
int devmm__count_elements(const char *who, int ndim, const int64_t *shape, size_t itemsize,
                          uint64_t *count);

/* A buffer of span bytes from r for a new tensor (or a devmm.Buffer, ADR 24), aligned to the
 * larger of alignment and devmm_tensor_default_alignment(r's device); to alignment alone when r
 * refuses the default with DEVMM_ENOTSUP (ADR 13) or alignment is no power of two. */
int devmm__tensor_buffer(devmm_resource *r, size_t span, size_t alignment, devmm_stream stream,
                         devmm_buffer **out);
/* A buffer owning ptr (nbytes long), which goes back to r (retained) with devmm_deallocate when
 * its last hold goes (ipc: an opened mapping). */
int devmm__buffer_wrap(devmm_resource *r, void *ptr, size_t nbytes, devmm_buffer **out);
/* buffer.c: frees ptr (from r) on the deferred-free thread once r's whole device is idle, and
 * never while a graph capture is underway (ADR 38); 0 if it cannot be queued (then the caller
 * frees). For frees whose consumers' streams are unknown (the torch bridge's, ADR 38). */
int devmm__defer_free(devmm_resource *r, void *ptr, size_t nbytes, size_t alignment);
/* The memory of a buffer the caller holds (devmm_buffer_acquire), whether or not its owner freed
 * it since: devmm_buffer_ptr answers NULL once the owner let go. */
void *devmm__buffer_held_ptr(const devmm_buffer *b);

#endif
