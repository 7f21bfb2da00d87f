#include "python_internal.h"

#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- array-interface exports
 * array_export(tensor capsule) -> an ArrayExport, or None once the owner freed the buffer.
 * An ArrayExport holds the tensor's memory from the moment it is made (the hold and the
 * address are taken in one step, with the GIL held) and exposes it through the buffer
 * protocol, read-only when the tensor is. The array interface hands it out as `data`, and
 * NumPy keeps that object, not the tensor, as the array's base: the memory is held exactly as
 * long as an array (or a view of one) made from it lives. */

typedef struct {
  py_ssize_t refcnt; /* the object header of the stable ABI (checked by py_load) */
  pyobject *type;
  devmm_buffer *held; /* a hold (devmm_buffer_acquire); NULL in an object made by hand */
  void *data;
  py_ssize_t len;
  int readonly;
} array_export;

/* A tensor with no elements has no memory, but NumPy 1.24 reads a NULL address as "no data":
 * such exports point here, 64-byte aligned, and are never read. */
static _Alignas(64) char no_elements[64];

#define Py_bf_getbuffer 1
#define Py_tp_dealloc 52
#define Py_tp_doc 56
#define Py_tp_repr 66
#define Py_tp_free 74
#define Py_TPFLAGS_DISALLOW_INSTANTIATION (1UL << 7)
#define Py_TPFLAGS_HAVE_VERSION_TAG (1UL << 18)
#define PyBUF_WRITABLE 0x0001

static int export_getbuffer(pyobject *self, void *view, int flags) {
  array_export *e = (array_export *)self;
  if (!e->held) {
    devmm__py.err_set_string(*devmm__py.value_error, "devmm.ArrayExport: holds no memory");
    return -1;
  }
  return devmm__py.buffer_fill_info(view, self, e->data, e->len, e->readonly, flags);
}

static pyobject *export_repr(pyobject *self) {
  array_export *e = (array_export *)self;
  return devmm__py.unicode_from_format("<devmm.ArrayExport: %zd bytes at %p%s>", e->len, e->data,
                                       e->readonly ? ", read-only" : "");
}

static void export_dealloc(pyobject *self) {
  pyobject *type = type_of(self);
  GUARDED(devmm_buffer_unacquire(((array_export *)self)->held));
  ((void (*)(void *))devmm__py.type_get_slot(type, Py_tp_free))(self);
  devmm__py.decref(type); /* an instance of a heap type holds a reference to it */
}

typedef struct {
  int slot;
  void *fn;
} type_slot;
typedef struct {
  const char *name;
  int basicsize, itemsize;
  unsigned int flags;
  type_slot *slots;
} type_spec;

static type_slot export_slots[] = {
    {Py_bf_getbuffer, (void *)export_getbuffer},
    {Py_tp_dealloc, (void *)export_dealloc},
    {Py_tp_repr, (void *)export_repr},
    {Py_tp_doc, (void *)"The memory of a devmm tensor, held for one array-interface export."},
    {0, NULL},
};
static type_spec export_spec = {
    .name = "devmm.ArrayExport",
    .basicsize = sizeof(array_export),
    .itemsize = 0,
    .flags = Py_TPFLAGS_HAVE_VERSION_TAG | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = export_slots,
};
static pyobject *export_type; /* made on first use (buffer slots: CPython >= 3.9) */

pyobject *devmm__py_array_export(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  devmm_tensor *t = devmm__py_arity(nargs, 1, "array_export")
                        ? devmm__py_tensor_of(args[0], "array_export")
                        : NULL;
  if (!t || (!export_type && !(export_type = devmm__py.type_from_spec(&export_spec))))
    return NULL;
  devmm_buffer *b = devmm_tensor_buffer(t);
  if (!devmm_device_host_accessible(devmm_buffer_device(b))) {
    devmm_set_error(DEVMM_EINVAL, "array_export: %s memory is not host memory",
                    devmm_resource_name(devmm_buffer_resource(b)));
    return devmm__py_none_ref();
  }
  if (devmm_buffer_acquire(b) != DEVMM_OK)
    return devmm__py_none_ref();
  array_export *e = (array_export *)devmm__py.generic_alloc(export_type, 0);
  if (!e) {
    devmm_buffer_unacquire(b);
    return NULL;
  }
  e->held = b;
  e->readonly = devmm_tensor_readonly(t);
  if (devmm_tensor_size(t)) { /* the bytes from element 0 through the last element */
    int n = devmm_tensor_ndim(t);
    const int64_t *shape = devmm_tensor_shape(t), *strides = devmm_tensor_strides(t);
    int64_t last = 0;
    for (int i = 0; i < n; i++)
      last += (shape[i] - 1) * strides[i]; /* checked to fit the buffer by devmm_tensor_create */
    e->data = (char *)devmm__buffer_held_ptr(b) + devmm_tensor_byte_offset(t);
    e->len = (py_ssize_t)((uint64_t)(last + 1) * devmm_dtype_itemsize(devmm_tensor_dtype(t)));
  } else {
    e->data = no_elements;
    e->len = 0;
  }
  return (pyobject *)e;
}
