/* DLPack export (the PyCapsule destructors a Python front end gives such an export are in
 * core/python/dlpack_capsule.c, the folder that knows CPython).
 *
 * One malloc per export holds the managed struct, its shape and strides, and the buffer hold:
 * the deleter drops the hold (the memory goes back when it was the last) and frees the block.
 * It touches no Python, so it may run on any thread, without the GIL, even after the
 * interpreter has finalised. */
#include "../tensor/tensor_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(devmm_dltensor) == 48, "DLTensor is 48 bytes");
_Static_assert(offsetof(devmm_dltensor, device) == 8, "DLTensor.device at 8");
_Static_assert(offsetof(devmm_dltensor, ndim) == 16, "DLTensor.ndim at 16");
_Static_assert(offsetof(devmm_dltensor, dtype) == 20, "DLTensor.dtype at 20");
_Static_assert(offsetof(devmm_dltensor, shape) == 24, "DLTensor.shape at 24");
_Static_assert(offsetof(devmm_dltensor, strides) == 32, "DLTensor.strides at 32");
_Static_assert(offsetof(devmm_dltensor, byte_offset) == 40, "DLTensor.byte_offset at 40");
_Static_assert(sizeof(devmm_dlmanaged) == 64, "DLManagedTensor is 64 bytes");
_Static_assert(sizeof(devmm_dlmanaged_versioned) == 80, "DLManagedTensorVersioned is 80 bytes");
_Static_assert(offsetof(devmm_dlmanaged_versioned, manager_ctx) == 8, "manager_ctx at 8");
_Static_assert(offsetof(devmm_dlmanaged_versioned, deleter) == 16, "deleter at 16");
_Static_assert(offsetof(devmm_dlmanaged_versioned, flags) == 24, "flags at 24");
_Static_assert(offsetof(devmm_dlmanaged_versioned, dl_tensor) == 32, "dl_tensor at 32");

#ifdef DEVMM_HAVE_DLPACK_H /* a system dlpack.h >= 1.0: check that both say the same */
#include <dlpack/dlpack.h>
_Static_assert(sizeof(DLTensor) == sizeof(devmm_dltensor), "DLTensor size");
_Static_assert(sizeof(DLManagedTensorVersioned) == sizeof(devmm_dlmanaged_versioned), "size");
_Static_assert(offsetof(DLManagedTensorVersioned, dl_tensor) ==
                   offsetof(devmm_dlmanaged_versioned, dl_tensor),
               "dl_tensor offset");
_Static_assert(DLPACK_FLAG_BITMASK_READ_ONLY == DEVMM_DLPACK_FLAG_READ_ONLY, "READ_ONLY");
#endif

const char devmm_capsule_name_versioned[] = "dltensor_versioned";
const char devmm_capsule_name[] = "dltensor";

/* Shape and strides follow the struct in the same block. The caller holds the buffer's memory:
 * its address is read from the buffer itself, not through the owner (who may free it now). */
static int64_t *fill(devmm_dltensor *dl, const devmm_tensor *t, int64_t *dims) {
  int n = devmm_tensor_ndim(t);
  devmm_buffer *b = devmm_tensor_buffer(t);
  memcpy(dims, devmm_tensor_shape(t), (size_t)n * sizeof(int64_t));
  memcpy(dims + n, devmm_tensor_strides(t), (size_t)n * sizeof(int64_t));
  dl->data =
      devmm_tensor_size(t) ? (char *)devmm__buffer_held_ptr(b) + devmm_tensor_byte_offset(t) : NULL;
  dl->device = devmm_buffer_device(b);
  dl->ndim = n;
  dl->dtype = devmm_tensor_dtype(t);
  dl->shape = n ? dims : NULL;
  dl->strides = n ? dims + n : NULL;
  dl->byte_offset = 0;
  return dims;
}

static void delete_versioned(devmm_dlmanaged_versioned *m) {
  if (m) {
    devmm_buffer_unacquire(m->manager_ctx);
    free(m);
  }
}

static void delete_legacy(devmm_dlmanaged *m) {
  if (m) {
    devmm_buffer_unacquire(m->manager_ctx);
    free(m);
  }
}

/* One block: the managed struct (head bytes, the DLTensor at dl_offset), then shape and
 * strides; takes a hold on the buffer for the export. */
static void *new_export(const devmm_tensor *t, size_t head, size_t dl_offset, const char *fn) {
  if (!t) {
    devmm_set_error(DEVMM_EINVAL, "%s: tensor is NULL", fn);
    return NULL;
  }
  int n = devmm_tensor_ndim(t);
  char *m = malloc(head + 2 * (size_t)n * sizeof(int64_t));
  if (!m) {
    devmm_set_error(DEVMM_ENOMEM, "DLPack export: out of host memory");
    return NULL;
  }
  if (devmm_buffer_acquire(devmm_tensor_buffer(t)) != DEVMM_OK) {
    free(m);
    return NULL;
  }
  fill((devmm_dltensor *)(m + dl_offset), t, (int64_t *)(m + head));
  return m;
}

int devmm_tensor_to_dlpack_versioned(const devmm_tensor *t, uint64_t flags,
                                     devmm_dlmanaged_versioned **out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_tensor_to_dlpack_versioned: out is NULL");
  devmm_dlmanaged_versioned *m =
      new_export(t, sizeof *m, offsetof(devmm_dlmanaged_versioned, dl_tensor),
                 "devmm_tensor_to_dlpack_versioned");
  if ((*out = m) == NULL)
    return devmm_last_status();
  m->version = (devmm_dlpack_version){DEVMM_DLPACK_MAJOR, DEVMM_DLPACK_MINOR};
  m->manager_ctx = devmm_tensor_buffer(t);
  m->deleter = delete_versioned;
  m->flags = flags | (devmm_tensor_readonly(t) ? DEVMM_DLPACK_FLAG_READ_ONLY : 0);
  return DEVMM_OK;
}

int devmm_tensor_to_dlpack(const devmm_tensor *t, devmm_dlmanaged **out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_tensor_to_dlpack: out is NULL");
  if (t && devmm_tensor_readonly(t)) {
    *out = NULL;
    return devmm_set_error(
        DEVMM_ENOTSUP,
        "DLPack export: a read-only tensor cannot go out as a legacy "
        "DLManagedTensor, which has no read-only flag (its consumer would "
        "write into it); ask for a versioned one (max_version >= (1, 0)), or, where the "
        "consumer cannot (torch 1.x), hand it a writable copy (Python: "
        "t.copy(); C: devmm_tensor_copy)");
  }
  devmm_dlmanaged *m =
      new_export(t, sizeof *m, offsetof(devmm_dlmanaged, dl_tensor), "devmm_tensor_to_dlpack");
  if ((*out = m) == NULL)
    return devmm_last_status();
  m->manager_ctx = devmm_tensor_buffer(t);
  m->deleter = delete_legacy;
  return DEVMM_OK;
}
