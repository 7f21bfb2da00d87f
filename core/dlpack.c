/* DLPack export and the PyCapsule destructors.
 *
 * One malloc per export holds the managed struct, its shape and strides, and the buffer hold:
 * the deleter drops the hold (the memory goes back when it was the last) and frees the block.
 * It touches no Python, so it may run on any thread, without the GIL, even after the
 * interpreter has finalised. */
#include "internal.h"

#include <dlfcn.h>
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

/* Shape and strides follow the struct in the same block. */
static int64_t *fill(devmm_dltensor *dl, const devmm_tensor *t, int64_t *dims) {
  int n = devmm_tensor_ndim(t);
  devmm_buffer *b = devmm_tensor_buffer(t);
  memcpy(dims, devmm_tensor_shape(t), (size_t)n * sizeof(int64_t));
  memcpy(dims + n, devmm_tensor_strides(t), (size_t)n * sizeof(int64_t));
  dl->data =
      devmm_tensor_size(t) ? (char *)devmm_buffer_ptr(b) + devmm_tensor_byte_offset(t) : NULL;
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
    return devmm_set_error(DEVMM_ENOTSUP,
                           "DLPack export: a read-only tensor cannot go out as a legacy "
                           "DLManagedTensor, which has no read-only flag (its consumer would "
                           "write into it); ask for a versioned one (max_version >= (1, 0))");
  }
  devmm_dlmanaged *m =
      new_export(t, sizeof *m, offsetof(devmm_dlmanaged, dl_tensor), "devmm_tensor_to_dlpack");
  if ((*out = m) == NULL)
    return devmm_last_status();
  m->manager_ctx = devmm_tensor_buffer(t);
  m->deleter = delete_legacy;
  return DEVMM_OK;
}

/* Which runtime addresses a device's memory: host memory (0) is addressable by every runtime;
 * the CUDA, ROCm and sim device types each belong to their runtime. */
static int runtime_of(int32_t type) {
  switch (type) {
  case DEVMM_DEVICE_CPU:
  case DEVMM_DEVICE_CUDA_HOST:
  case DEVMM_DEVICE_ROCM_HOST:
    return 0;
  case DEVMM_DEVICE_CUDA:
  case DEVMM_DEVICE_CUDA_MANAGED:
    return DEVMM_DEVICE_CUDA;
  default:
    return type;
  }
}

/* Orders work on `stream` (of resource via) after the work on side's stream: an event through
 * side's runtime when both sides share it, else a host wait on side's stream. */
static int order_after(devmm_resource *via, devmm_stream stream, devmm_resource *side,
                       devmm_stream side_stream) {
  if (side == via && side_stream == stream)
    return DEVMM_OK;
  int rv = runtime_of(devmm_resource_device(via).device_type);
  if (rv && rv == runtime_of(devmm_resource_device(side).device_type))
    return devmm_stream_wait(side, stream, side_stream);
  return devmm_synchronize(side, side_stream);
}

/* Copies every element of t into a compact row-major tensor on dst: one copy when the source
 * is compact already, else one copy per contiguous run of the last dimension (a padded
 * tensor's rows). The copy goes through a resource that can address both sides, with the
 * direction known: the device side's resource for host <-> device (a device runtime copies to
 * and from host memory), the source's for device -> device of one runtime (a peer copy) and
 * for host -> host; devices of two runtimes are refused. It runs on that resource's stream
 * after the source's and the destination's streams, and is complete when this returns. */
int devmm_tensor_copy(const devmm_tensor *t, devmm_resource *dst, devmm_tensor **out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_tensor_copy: out is NULL");
  *out = NULL;
  if (!t || !dst)
    return devmm_set_error(DEVMM_EINVAL, "devmm_tensor_copy: %s is NULL",
                           !t ? "tensor" : "destination resource");
  devmm_buffer *src = devmm_tensor_buffer(t);
  if (devmm_buffer_is_freed(src))
    return devmm_set_error(DEVMM_ESTATE, "tensor copy: its buffer was freed");
  devmm_resource *src_res = devmm_buffer_resource(src);
  devmm_device sd = devmm_buffer_device(src), dd = devmm_resource_device(dst);
  char sname[32], dname[32];
  devmm_device_format(sd, sname, sizeof sname);
  devmm_device_format(dd, dname, sizeof dname);
  int rs = runtime_of(sd.device_type), rd = runtime_of(dd.device_type);
  if (rs && rd && rs != rd)
    return devmm_set_error(DEVMM_ENOTSUP,
                           "tensor copy %s -> %s: no resource can address both (two runtimes): "
                           "copy to cpu first",
                           sname, dname);
  /* host -> device: the destination's runtime; otherwise the source's */
  devmm_resource *via = !rs && rd ? dst : src_res;
  devmm_stream stream = via == src_res ? devmm_buffer_stream(src) : NULL;
  int n = devmm_tensor_ndim(t);
  const int64_t *shape = devmm_tensor_shape(t), *sst = devmm_tensor_strides(t);
  devmm_dtype dt = devmm_tensor_dtype(t);
  size_t item = devmm_dtype_itemsize(dt);
  devmm_layout rm = devmm_layout_row_major();
  int64_t dst_strides[DEVMM_MAX_NDIM];
  devmm_layout_result lr;
  int rc = devmm_layout_compute(&rm, n, shape, item, dst_strides, &lr);
  if (rc)
    return rc;
  /* the destination is allocated on the copy's stream when the copy runs on its device */
  devmm_stream dst_stream =
      via == dst || (devmm__has_streams(dst) && rs == rd && sd.device_id == dd.device_id) ? stream
                                                                                          : NULL;
  devmm_buffer *b;
  if ((rc = devmm__tensor_buffer(dst, lr.span_bytes, 0, dst_stream, &b)) != 0)
    return rc;
  const char *from = (const char *)devmm_buffer_ptr(src) + devmm_tensor_byte_offset(t);
  char *to = devmm_buffer_ptr(b);
  int compact = 1;
  for (int i = 0; i < n; i++)
    compact &= shape[i] <= 1 || sst[i] == dst_strides[i];
  if (lr.nelems && via == dst)
    rc = order_after(via, stream, src_res, devmm_buffer_stream(src));
  if (lr.nelems && !rc && via != dst)
    rc = order_after(via, stream, dst, dst_stream);
  if (lr.nelems == 0 || rc) {
    /* nothing to copy, or the ordering failed */
  } else if (compact) {
    rc = devmm_copy(via, to, from, lr.span_bytes, stream);
  } else {
    /* runs: the last dimension when it is contiguous, else single elements */
    int64_t run = n && sst[n - 1] == 1 ? shape[n - 1] : 1;
    int outer = run > 1 ? n - 1 : n;
    int64_t idx[DEVMM_MAX_NDIM] = {0};
    for (size_t k = 0; !rc && k < lr.nelems / (size_t)run; k++) {
      int64_t so = 0, dof = 0;
      for (int i = 0; i < outer; i++)
        so += idx[i] * sst[i], dof += idx[i] * dst_strides[i];
      rc = devmm_copy(via, to + dof * (int64_t)item, from + so * (int64_t)item, (size_t)run * item,
                      stream);
      for (int i = outer - 1; i >= 0; i--) {
        if (++idx[i] < shape[i])
          break;
        idx[i] = 0;
      }
    }
  }
  if (!rc && lr.nelems)
    rc = devmm_synchronize(via, stream);
  if (rc) {
    char why[DEVMM__MSG_MAX];
    snprintf(why, sizeof why, "%s", devmm_last_error());
    devmm_set_error(devmm_last_status(), "tensor copy %s -> %s through '%s': %s", sname, dname,
                    devmm_resource_name(via), why);
  }
  if (!rc)
    rc = devmm_tensor_create(b, dt, n, shape, dst_strides, 0, 0, out);
  devmm_buffer_release(b);
  return rc;
}

/* ---------------------------------------------------------------- PyCapsule destructors */

typedef int (*is_valid_fn)(void *, const char *);
typedef void *(*get_pointer_fn)(void *, const char *);

/* Called by Python with the GIL held, so these lookups need no lock of their own: the
 * interpreter serialises every call. */
static void capsule_free(void *capsule, const char *name, int versioned) {
  static is_valid_fn is_valid;
  static get_pointer_fn get_pointer;
  if (!is_valid) {
    get_pointer = (get_pointer_fn)dlsym(RTLD_DEFAULT, "PyCapsule_GetPointer");
    is_valid = (is_valid_fn)dlsym(RTLD_DEFAULT, "PyCapsule_IsValid");
    if (!is_valid || !get_pointer)
      return; /* no Python in this process: nothing can have made a capsule */
  }
  if (!is_valid(capsule, name))
    return; /* consumed ("used_dltensor...") or not ours */
  void *p = get_pointer(capsule, name);
  if (versioned)
    delete_versioned(p);
  else
    delete_legacy(p);
}

void devmm_capsule_destructor_versioned(void *capsule) {
  capsule_free(capsule, devmm_capsule_name_versioned, 1);
}

void devmm_capsule_destructor(void *capsule) { capsule_free(capsule, devmm_capsule_name, 0); }
