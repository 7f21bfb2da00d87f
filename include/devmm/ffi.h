/* devmm — entry points for foreign-function front ends (Python's ctypes, cffi, ...).
 *
 * Each does the work of several public calls in one, takes only scalars and pointers, and
 * returns its result directly (NULL on failure, with devmm_last_error() set), because one
 * foreign call costs far more than the work here. Packed values:
 *   device = (device_type << 32) | device_id;   dtype = code | bits << 8 | lanes << 16.
 * For CPython, devmm_ffi_python_function goes further: built-in functions that take and return
 * Python objects, so the hot paths make no foreign call at all (ADR 12). */
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
/* devmm_init(path), with the warnings it would print on stderr (plugins not loaded, devices
 * without a resource, ...) returned in *warnings instead, one "[who: ]warning: text" per line
 * (free with devmm_string_free; NULL if none), so that a front end says each once its own way. */
DEVMM_API int devmm_ffi_init(const char *path, char **warnings);
/* The same for devmm_init_text (devmm.ini text in memory, named name in messages). */
DEVMM_API int devmm_ffi_init_text(const char *text, size_t len, const char *name, char **warnings);
/* path opened for writing a page (a timeline's HTML or SVG) by the rules devmm opens its log
 * files by (ADR 42; a new file 0644, no character device), truncated after the checks: *fd, which
 * the caller closes. A refusal says why ("refusing to write 'path': ..."). */
DEVMM_API int devmm_ffi_open_page(const char *path, int *fd);
/* dtype in the packed form above. */
DEVMM_API uint32_t devmm_ffi_dtype_pack(devmm_dtype dtype);
/* A CPython built-in function (a new reference) named name, made with CPython's stable ABI
 * found at run time (libdevmm never links Python); None, with devmm_last_error() set, for an
 * unknown name. Call it with the GIL held (ctypes.PyDLL). The built-ins (ADR 12, ADR 24) take
 * and return PyCapsules that own devmm objects ("devmm.tensor", "devmm.buffer", "devmm.hold",
 * "devmm.resource"):
 *   empty(resource|None, (device_type, device_id), layout address|None, shape tuple of ints,
 *         packed dtype, stream|None) -> tensor capsule | None  (devmm_ffi_tensor_empty)
 *   own_tensor(address), own_buffer(address), own_resource(address) -> capsule that takes
 *   the object (or reference) over
 *   handle(capsule), buffer_of(capsule) -> address;  buffer_free(capsule) -> None
 *   buffer(resource, nbytes, alignment, stream|None) -> buffer capsule aligned as tensors are
 *   hold(capsule) -> (capsule holding the memory like an export, its address) | None once freed
 *   array_export(tensor capsule) -> devmm.ArrayExport (a buffer-protocol object holding the
 *         memory, for __array_interface__'s data) | None once freed
 *   dlpack(tensor capsule, flags, versioned[, as_cpu]) -> "dltensor[_versioned]" capsule | None
 *   callbacks(allocate, deallocate) -> (alloc_fn, free_fn, destroy_fn, user): C trampolines
 *         calling two Python functions, for devmm_callback_resource_create
 *   constants() -> {name: value} of devmm's C constants;  version() -> devmm_version() as str
 *   dtype(name bytes) -> (code, bits, lanes, itemsize, packed) | None  (devmm_dtype_parse)
 *   callbacks_disable() -> None  (devmm_callbacks_disable)
 * None means devmm failed: devmm_last_status()/devmm_last_error() say why. Arguments of the
 * wrong type or range raise TypeError/OverflowError; addresses are trusted as given. */
DEVMM_API void *devmm_ffi_python_function(const char *name);
/* CPython's extension-module entry (ADR 45): importlib's extension loader, given this library's
 * path and the name devmm._libdevmm, makes a module whose one function, function(name: bytes),
 * is devmm_ffi_python_function; how the devmm package loads libdevmm without ctypes. NULL
 * (no exception set) when this Python's objects are not laid out as its stable ABI says. */
DEVMM_API void *PyInit__libdevmm(void);

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
/* torch's record_stream_fn (CUDAPluggableAllocator::set_record_stream_fn): ptr, a live torch
 * allocation, is used on stream too; its free then orders the allocation stream after stream's
 * work (an event), so that the memory is reused only after it (ADR 38). */
DEVMM_API void devmm_torch_record_stream(void *ptr, void *stream);
/* on != 0: every torch free waits for its whole device (on devmm's deferred-free thread) before
 * the memory is reused: what devmm.interop.torch.use_devmm() sets when torch offers no
 * record_stream hook, so that a tensor used on another stream is never reused too early. */
DEVMM_API void devmm_torch_free_waits_for_device(int on);

#ifdef __cplusplus
}
#endif
#endif
