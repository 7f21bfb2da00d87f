/* devmm — DLPack export (DLPack 1.x versioned, and the legacy 0.x DLManagedTensor).
 *
 * The types below are devmm's own declarations of the published DLPack ABI (LP64 layout:
 * DLTensor 48 bytes, DLManagedTensor 64, DLManagedTensorVersioned 80), so no dlpack.h is
 * needed; when a system <dlpack/dlpack.h> >= 1.0 is present the build checks that both agree.
 * An export holds the buffer's memory until its deleter runs (on any thread, without the GIL):
 *
 *   devmm_dlmanaged_versioned *m;
 *   devmm_tensor_to_dlpack_versioned(t, 0, &m);   ... consumer ...   m->deleter(m);
 */
#ifndef DEVMM_DLPACK_H
#define DEVMM_DLPACK_H

#include "dtype.h"
#include "export.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DEVMM_DLPACK_MAJOR 1
#define DEVMM_DLPACK_MINOR 1

/* DLPack flags of DLManagedTensorVersioned. */
#define DEVMM_DLPACK_FLAG_READ_ONLY (1ull << 0)
#define DEVMM_DLPACK_FLAG_IS_COPIED (1ull << 1)
#define DEVMM_DLPACK_FLAG_IS_SUBBYTE_TYPE_PADDED (1ull << 2)

typedef struct devmm_dlpack_version {
  uint32_t major, minor;
} devmm_dlpack_version;

/* DLTensor. */
typedef struct devmm_dltensor {
  void *data;
  devmm_device device;
  int32_t ndim;
  devmm_dtype dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} devmm_dltensor;

/* DLManagedTensor (legacy, DLPack < 1.0). */
typedef struct devmm_dlmanaged {
  devmm_dltensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct devmm_dlmanaged *self);
} devmm_dlmanaged;

/* DLManagedTensorVersioned (DLPack >= 1.0). */
typedef struct devmm_dlmanaged_versioned {
  devmm_dlpack_version version;
  void *manager_ctx;
  void (*deleter)(struct devmm_dlmanaged_versioned *self);
  uint64_t flags;
  devmm_dltensor dl_tensor;
} devmm_dlmanaged_versioned;

/* Exports t as a versioned managed tensor (flags: DEVMM_DLPACK_FLAG_*; READ_ONLY is added for a
 * read-only tensor). data points at element 0 (byte_offset is 0), strides are always filled,
 * data is NULL for a tensor with no elements. Fails once the buffer was freed. */
DEVMM_API int devmm_tensor_to_dlpack_versioned(const devmm_tensor *t, uint64_t flags,
                                               devmm_dlmanaged_versioned **out);
/* Exports t as a legacy DLManagedTensor (no flags: consumers treat it as writable, so a
 * read-only tensor is refused with DEVMM_ENOTSUP). */
DEVMM_API int devmm_tensor_to_dlpack(const devmm_tensor *t, devmm_dlmanaged **out);
/* devmm_tensor_copy (a copy to another resource) is declared in tensor.h, included above. */

/* PyCapsule destructors for "dltensor_versioned" / "dltensor" capsules, for a Python front end
 * that makes capsules with PyCapsule_New. They free a capsule that was never consumed (its name
 * is unchanged) and leave a consumed one ("used_...") alone. They find PyCapsule_IsValid and
 * PyCapsule_GetPointer in the process at run time: libdevmm never links Python. */
DEVMM_API void devmm_capsule_destructor_versioned(void *capsule);
DEVMM_API void devmm_capsule_destructor(void *capsule);
/* The capsule names, as static strings (a capsule keeps the pointer it was given). */
DEVMM_API extern const char devmm_capsule_name_versioned[];
DEVMM_API extern const char devmm_capsule_name[];

#ifdef __cplusplus
}
#endif
#endif
