/* PyTorch's pluggable allocator, devmm's side (include/devmm/ffi.h: devmm_torch_allocate and
 * devmm_torch_deallocate): each CUDA device's current resource, pinned at its first allocation
 * so that every free goes back to the resource that allocated. libdevmm-torch (torch_alloc.cpp,
 * beside this file) wraps these in the signatures torch calls, which throw (ADR 11); the Python
 * side is python/devmm/interop/torch.py. */
#include "../resource/resource_internal.h"

#include <stdio.h>

#define TORCH_DEVICES 64
static _Atomic(devmm_resource *) torch_pinned[TORCH_DEVICES];

static devmm_resource *torch_resource(int device) {
  if (device < 0 || device >= TORCH_DEVICES) {
    devmm_set_error(DEVMM_EINVAL, "devmm_torch_allocate: device %d out of range 0..%d", device,
                    TORCH_DEVICES - 1);
    return NULL;
  }
  devmm_resource *r = atomic_load(&torch_pinned[device]);
  if (r)
    return r;
  devmm_device d = {DEVMM_DEVICE_CUDA, device};
  if (devmm_get_current_resource(d, &r) != DEVMM_OK)
    return NULL;
  devmm_resource *expected = NULL; /* first caller wins; the reference stays pinned */
  if (!atomic_compare_exchange_strong(&torch_pinned[device], &expected, r)) {
    devmm_resource_release(r);
    r = expected;
  }
  return r;
}

int devmm_torch_allocate(size_t size, int device, void *stream, void **out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_torch_allocate: out is NULL");
  *out = NULL;
  devmm_resource *r = torch_resource(device);
  if (!r)
    return devmm_last_status();
  int rc = devmm_allocate(r, size, 0, stream, out);
  if (rc) {
    char why[DEVMM__MSG_MAX];
    snprintf(why, sizeof why, "%s", devmm_last_error());
    return devmm_set_error(rc, "torch allocation of %zu bytes on cuda:%d: %s", size, device, why);
  }
  return DEVMM_OK;
}

void devmm_torch_deallocate(void *ptr, size_t size, int device, void *stream) {
  devmm_resource *r =
      device >= 0 && device < TORCH_DEVICES ? atomic_load(&torch_pinned[device]) : NULL;
  if (!r) {
    devmm_set_error(DEVMM_ESTATE, "devmm_torch_deallocate: cuda:%d never allocated through devmm",
                    device);
    return;
  }
  if (devmm_deallocate(r, ptr, size, 0, stream) != DEVMM_OK)
    devmm__diag(DEVMM_LOG_ERROR, NULL, "devmm_torch_deallocate: %s", devmm_last_error());
}
