/* Entry points for foreign-function front ends: see include/devmm/ffi.h. */
#include "internal.h"

#include <dlfcn.h>
#include <stdio.h>

devmm_tensor *devmm_ffi_tensor_empty(devmm_resource *r, int64_t device, const devmm_layout *layout,
                                     int ndim, const int64_t *shape, uint32_t dtype,
                                     devmm_stream stream) {
  devmm_device d = {(int32_t)(device >> 32), (int32_t)(device & 0xffffffff)};
  devmm_dtype t = {(uint8_t)(dtype & 0xff), (uint8_t)((dtype >> 8) & 0xff),
                   (uint16_t)(dtype >> 16)};
  devmm_tensor *out;
  return devmm_tensor_empty(r, d, layout, ndim, shape, t, stream, &out) == DEVMM_OK ? out : NULL;
}

typedef void *(*capsule_new_fn)(void *, const char *, void (*)(void *));

/* Failure returns None, not NULL: ctypes would decref a NULL py_object result. */
static void *(*capsule_new)(void *, const char *, void (*)(void *));
static void (*incref)(void *);
static void *none;

static void *fail_none(void) {
  incref(none);
  return none;
}

void *devmm_ffi_dlpack_capsule(const devmm_tensor *t, uint64_t flags, int versioned) {
  if (!capsule_new) { /* the GIL serialises callers */
    incref = (void (*)(void *))dlsym(RTLD_DEFAULT, "Py_IncRef");
    none = dlsym(RTLD_DEFAULT, "_Py_NoneStruct");
    capsule_new = (capsule_new_fn)dlsym(RTLD_DEFAULT, "PyCapsule_New");
    if (!incref || !none || !capsule_new) {
      capsule_new = NULL;
      devmm_set_error(DEVMM_ENOTSUP, "devmm_ffi_dlpack_capsule: no Python in this process");
      return NULL; /* not reached from Python, which has these symbols */
    }
  }
  void *m;
  void (*destructor)(void *);
  const char *name;
  int rc;
  if (versioned) {
    rc = devmm_tensor_to_dlpack_versioned(t, flags, (devmm_dlmanaged_versioned **)&m);
    destructor = devmm_capsule_destructor_versioned;
    name = devmm_capsule_name_versioned;
  } else {
    rc = devmm_tensor_to_dlpack(t, (devmm_dlmanaged **)&m);
    destructor = devmm_capsule_destructor;
    name = devmm_capsule_name;
  }
  if (rc)
    return fail_none();
  void *capsule = capsule_new(m, name, destructor);
  if (!capsule) { /* Python set MemoryError; give the export back */
    if (versioned)
      ((devmm_dlmanaged_versioned *)m)->deleter(m);
    else
      ((devmm_dlmanaged *)m)->deleter(m);
    devmm_set_error(DEVMM_ENOMEM, "DLPack export: PyCapsule_New failed");
  }
  return capsule; /* NULL only with a Python exception set, which ctypes raises */
}

/* ---------------------------------------------------------------- PyTorch's pluggable allocator */

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
    devmm__log(DEVMM_LOG_ERROR, NULL, "devmm_torch_deallocate: %s", devmm_last_error());
}
