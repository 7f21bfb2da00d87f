/* Copying a tensor to another resource (devmm_tensor_copy, include/devmm/tensor.h): host <->
 * device, device <-> device of one runtime, host <-> host, ordered after both sides' streams. */
#include "tensor_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Which runtime addresses a device's memory: host memory (0) is addressable by every runtime;
 * the CUDA, ROCm and sim device types each belong to their runtime. */
static int runtime_of(int32_t type) {
  switch (type) {
  case DEVMM_DEVICE_CPU:
  case DEVMM_DEVICE_CUDA_HOST:
  case DEVMM_DEVICE_ROCM_HOST:
  case DEVMM_DEVICE_SIM_HOST:
    return 0;
  case DEVMM_DEVICE_CUDA:
  case DEVMM_DEVICE_CUDA_MANAGED:
    return DEVMM_DEVICE_CUDA;
  case DEVMM_DEVICE_SIM_MANAGED:
    return DEVMM_DEVICE_SIM;
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
