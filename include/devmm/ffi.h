/* devmm — entry points for foreign-function front ends (Python's ctypes, cffi, ...).
 *
 * Each does the work of several public calls in one, takes only scalars and pointers, and
 * returns its result directly (NULL on failure, with devmm_last_error() set), because one
 * foreign call costs far more than the work here. Packed values:
 *   device = (device_type << 32) | device_id;   dtype = code | bits << 8 | lanes << 16. */
#ifndef DEVMM_FFI_H
#define DEVMM_FFI_H

#include "export.h"
#include "layout.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* devmm_tensor_empty with packed device and dtype; returns the tensor or NULL. */
DEVMM_API devmm_tensor *devmm_ffi_tensor_empty(devmm_resource *r, int64_t device,
                                               const devmm_layout *layout, int ndim,
                                               const int64_t *shape, uint32_t dtype,
                                               devmm_stream stream);
/* A PyCapsule ("dltensor_versioned" if versioned, else "dltensor") owning a new export of t,
 * or None (a new reference) when the export fails. Must be called with the GIL held
 * (ctypes.PyDLL); Python's functions are found at run time. */
DEVMM_API void *devmm_ffi_dlpack_capsule(const devmm_tensor *t, uint64_t flags, int versioned);

/* PyTorch's allocations (ADR 11): allocations for cuda:<device> go through the resource that
 * was current for that device at its first allocation (pinned for the life of the process, so
 * every free reaches the resource that allocated). A status, with devmm_last_error() set; never
 * a NULL pointer for a non-empty request. Torch itself calls libdevmm-torch.so's
 * devmm_torch_alloc/devmm_torch_free (CUDAPluggableAllocator's signatures), which throw a C++
 * exception on failure: torch uses a returned pointer unchecked. */
DEVMM_API int devmm_torch_allocate(size_t size, int device, void *stream, void **out);
/* The matching free (torch passes the size, device and stream of the allocation); a failure is
 * logged (torch has nobody to tell). */
DEVMM_API void devmm_torch_deallocate(void *ptr, size_t size, int device, void *stream);

#ifdef __cplusplus
}
#endif
#endif
