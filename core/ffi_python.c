/* CPython built-in functions made at run time (ADR 12): the Python package's hot paths and the
 * owners of its C objects, without a compiled extension module.
 *
 * libdevmm never links or includes Python. devmm_ffi_python_function (called through
 * ctypes.PyDLL, so with the GIL held) finds a few functions of CPython's stable ABI with
 * dlsym and makes built-in function objects (PyCFunction, METH_FASTCALL) from the static
 * method definitions below. Calling one costs what calling len() costs, not what a ctypes call
 * costs. The tensors, buffers and holds they hand out are PyCapsules whose destructors release
 * the C object: the Python objects that keep such a capsule need no __del__.
 *
 * Every function here runs with the GIL held (a built-in is only ever called by Python), so the
 * table of Python functions is filled once, by the first call, and read without a lock after. */
#include "internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef struct pyobject pyobject; /* opaque: PyObject */
typedef intptr_t py_ssize_t;      /* Py_ssize_t */

/* PyMethodDef, as the stable ABI lays it out. */
typedef struct {
  const char *name;
  void *meth;
  int flags;
  const char *doc;
} method_def;
#define METH_FASTCALL 0x0080

static struct {
  pyobject *(*cfunction_new)(method_def *, pyobject *, pyobject *);
  pyobject *(*capsule_new)(void *, const char *, void (*)(pyobject *));
  void *(*capsule_get_pointer)(pyobject *, const char *);
  int (*capsule_is_valid)(pyobject *, const char *);
  long long (*as_long_long)(pyobject *);
  void *(*as_void_ptr)(pyobject *);
  pyobject *(*from_void_ptr)(void *);
  pyobject *(*from_long_long)(long long);
  py_ssize_t (*tuple_size)(pyobject *);
  pyobject *(*tuple_get_item)(pyobject *, py_ssize_t);
  pyobject *(*err_occurred)(void);
  void (*err_set_string)(pyobject *, const char *);
  pyobject **type_error; /* &PyExc_TypeError */
  void (*incref)(pyobject *);
  void (*decref)(pyobject *);
  pyobject *none;
  pyobject *(*dict_new)(void);
  int (*dict_set_item_string)(pyobject *, const char *, pyobject *);
} py;

static const struct {
  const char *symbol;
  size_t offset;
} py_symbols[] = {
#define SYM(field, name)                                                                           \
  { name, offsetof(__typeof__(py), field) }
    SYM(cfunction_new, "PyCFunction_NewEx"),
    SYM(capsule_new, "PyCapsule_New"),
    SYM(capsule_get_pointer, "PyCapsule_GetPointer"),
    SYM(capsule_is_valid, "PyCapsule_IsValid"),
    SYM(as_long_long, "PyLong_AsLongLong"),
    SYM(as_void_ptr, "PyLong_AsVoidPtr"),
    SYM(from_void_ptr, "PyLong_FromVoidPtr"),
    SYM(from_long_long, "PyLong_FromLongLong"),
    SYM(tuple_size, "PyTuple_Size"),
    SYM(tuple_get_item, "PyTuple_GetItem"),
    SYM(err_occurred, "PyErr_Occurred"),
    SYM(err_set_string, "PyErr_SetString"),
    SYM(type_error, "PyExc_TypeError"),
    SYM(incref, "Py_IncRef"),
    SYM(decref, "Py_DecRef"),
    SYM(none, "_Py_NoneStruct"),
    SYM(dict_new, "PyDict_New"),
    SYM(dict_set_item_string, "PyDict_SetItemString"),
#undef SYM
};

static int py_load(void) {
  if (py.none)
    return 1;
  void *found[sizeof py_symbols / sizeof py_symbols[0]];
  for (size_t i = 0; i < sizeof py_symbols / sizeof py_symbols[0]; i++)
    if ((found[i] = dlsym(RTLD_DEFAULT, py_symbols[i].symbol)) == NULL) {
      devmm_set_error(DEVMM_ENOTSUP,
                      "devmm_ffi_python_function: %s not found: no Python in "
                      "this process",
                      py_symbols[i].symbol);
      return 0;
    }
  /* `none` last: it says the table is complete */
  for (size_t i = 0; i < sizeof py_symbols / sizeof py_symbols[0]; i++)
    if (strcmp(py_symbols[i].symbol, "_Py_NoneStruct") != 0)
      memcpy((char *)&py + py_symbols[i].offset, &found[i], sizeof(void *));
  py.none = dlsym(RTLD_DEFAULT, "_Py_NoneStruct");
  return 1;
}

/* ---------------------------------------------------------------- argument helpers */

static pyobject *none_ref(void) {
  py.incref(py.none);
  return py.none;
}

static int arity(py_ssize_t nargs, py_ssize_t want, const char *fn) {
  if (nargs == want)
    return 1;
  char msg[96];
  snprintf(msg, sizeof msg, "%s() takes %d arguments (%d given)", fn, (int)want, (int)nargs);
  py.err_set_string(*py.type_error, msg);
  return 0;
}

/* The int o as a long long: 0 (a Python exception set) when it is not one or does not fit. */
static int int_arg(pyobject *o, long long *out) {
  *out = py.as_long_long(o);
  return *out != -1 || !py.err_occurred();
}

/* An address (an int), or NULL for None. */
static int ptr_arg(pyobject *o, void **out) {
  if (o == py.none) {
    *out = NULL;
    return 1;
  }
  *out = py.as_void_ptr(o);
  return *out || !py.err_occurred();
}

/* ---------------------------------------------------------------- capsules: C-owned objects */

static const char tensor_name[] = "devmm.tensor";     /* owns a devmm_tensor */
static const char buffer_name[] = "devmm.buffer";     /* owns a reference to a devmm_buffer */
static const char hold_name[] = "devmm.hold";         /* owns a hold on a devmm_buffer's memory */
static const char resource_name[] = "devmm.resource"; /* owns a reference to a resource */

static void tensor_capsule_free(pyobject *cap) {
  devmm_tensor_destroy(py.capsule_get_pointer(cap, tensor_name));
}
static void buffer_capsule_free(pyobject *cap) {
  devmm_buffer_release(py.capsule_get_pointer(cap, buffer_name));
}
static void hold_capsule_free(pyobject *cap) {
  devmm_buffer_unacquire(py.capsule_get_pointer(cap, hold_name));
}
static void resource_capsule_free(pyobject *cap) {
  devmm_resource_release(py.capsule_get_pointer(cap, resource_name));
}

static void undo_tensor(void *p) { devmm_tensor_destroy(p); }
static void undo_buffer(void *p) { devmm_buffer_release(p); }
static void undo_hold(void *p) { devmm_buffer_unacquire(p); }
static void undo_resource(void *p) { devmm_resource_release(p); }

/* A capsule owning p; on failure (Python set MemoryError) p is given back with undo. */
static pyobject *own(void *p, const char *name, void (*destroy)(pyobject *), void (*undo)(void *)) {
  pyobject *cap = py.capsule_new(p, name, destroy);
  if (!cap)
    undo(p);
  return cap;
}

/* The tensor of a tensor capsule, or the buffer of a tensor or buffer capsule (NULL with
 * Python's ValueError set for anything else). */
static devmm_tensor *tensor_of(pyobject *cap) { return py.capsule_get_pointer(cap, tensor_name); }
static devmm_buffer *buffer_of(pyobject *cap) {
  if (py.capsule_is_valid(cap, tensor_name))
    return devmm_tensor_buffer(py.capsule_get_pointer(cap, tensor_name));
  return py.capsule_get_pointer(cap, buffer_name);
}

/* ---------------------------------------------------------------- the built-ins */

/* empty(resource: int | None, device: (type, id), layout: int | None, shape: tuple,
 *       dtype: packed int, stream: int | None) -> tensor capsule, or None (devmm's error set) */
static pyobject *f_empty(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  void *r, *layout, *stream;
  long long type, id, dtype, v;
  if (!arity(nargs, 6, "empty") || !ptr_arg(args[0], &r) || !ptr_arg(args[2], &layout) ||
      !int_arg(args[4], &dtype) || !ptr_arg(args[5], &stream))
    return NULL;
  pyobject *d0 = py.tuple_get_item(args[1], 0), *d1 = d0 ? py.tuple_get_item(args[1], 1) : NULL;
  if (!d1 || !int_arg(d0, &type) || !int_arg(d1, &id))
    return NULL;
  py_ssize_t n = py.tuple_size(args[3]);
  if (n < 0)
    return NULL;
  if (n > DEVMM_MAX_NDIM) {
    devmm_set_error(DEVMM_EINVAL, "empty: %d dimensions, at most %d are supported", (int)n,
                    DEVMM_MAX_NDIM);
    return none_ref();
  }
  int64_t shape[DEVMM_MAX_NDIM];
  for (py_ssize_t i = 0; i < n; i++) {
    if (!int_arg(py.tuple_get_item(args[3], i), &v))
      return NULL; /* TypeError or OverflowError: the front end says which entry */
    shape[i] = v;
  }
  int64_t device = (int64_t)((uint64_t)(uint32_t)type << 32 | (uint32_t)id);
  devmm_tensor *t =
      devmm_ffi_tensor_empty(r, device, layout, (int)n, shape, (uint32_t)dtype, stream);
  return t ? own(t, tensor_name, tensor_capsule_free, undo_tensor) : none_ref();
}

/* own_tensor(address) / own_buffer(address) / own_resource(address) -> capsule: takes over a
 * tensor, or a buffer or resource reference, that a C call returned. */
static pyobject *own_arg(pyobject *const *args, py_ssize_t nargs, const char *fn, const char *name,
                         void (*destroy)(pyobject *), void (*undo)(void *)) {
  void *p;
  if (!arity(nargs, 1, fn) || !ptr_arg(args[0], &p))
    return NULL;
  if (!p) {
    py.err_set_string(*py.type_error, "devmm: cannot take over a NULL object");
    return NULL;
  }
  return own(p, name, destroy, undo);
}
static pyobject *f_own_tensor(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  return own_arg(args, nargs, "own_tensor", tensor_name, tensor_capsule_free, undo_tensor);
}
static pyobject *f_own_buffer(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  return own_arg(args, nargs, "own_buffer", buffer_name, buffer_capsule_free, undo_buffer);
}
static pyobject *f_own_resource(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  return own_arg(args, nargs, "own_resource", resource_name, resource_capsule_free, undo_resource);
}

/* handle(capsule) -> the address of its tensor or buffer, for the C API's other calls */
static pyobject *f_handle(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  if (!arity(nargs, 1, "handle"))
    return NULL;
  void *p = py.capsule_is_valid(args[0], tensor_name)
                ? py.capsule_get_pointer(args[0], tensor_name)
                : py.capsule_get_pointer(args[0], buffer_name);
  return p ? py.from_void_ptr(p) : NULL;
}

/* buffer_of(capsule) -> the address of the buffer of a tensor or buffer capsule */
static pyobject *f_buffer_of(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  devmm_buffer *b = arity(nargs, 1, "buffer_of") ? buffer_of(args[0]) : NULL;
  return b ? py.from_void_ptr(b) : NULL;
}

/* buffer_free(capsule): the owner gives up the memory of a tensor's or a buffer's buffer */
static pyobject *f_buffer_free(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  devmm_buffer *b = arity(nargs, 1, "buffer_free") ? buffer_of(args[0]) : NULL;
  if (!b)
    return NULL;
  devmm_buffer_free(b);
  return none_ref();
}

/* hold(capsule) -> a capsule holding the memory of the tensor's or buffer's buffer until it
 * goes (as an export does), or None when the owner freed it already (devmm's error set) */
static pyobject *f_hold(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  devmm_buffer *b = arity(nargs, 1, "hold") ? buffer_of(args[0]) : NULL;
  if (!b)
    return NULL;
  if (devmm_buffer_acquire(b) != DEVMM_OK)
    return none_ref();
  return own(b, hold_name, hold_capsule_free, undo_hold);
}

/* dlpack(tensor capsule, flags, versioned) -> a "dltensor_versioned" (versioned true) or
 * "dltensor" capsule owning a new export, or None when the export fails (devmm's error set) */
static pyobject *f_dlpack(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  long long flags, versioned;
  devmm_tensor *t = arity(nargs, 3, "dlpack") ? tensor_of(args[0]) : NULL;
  if (!t || !int_arg(args[1], &flags) || !int_arg(args[2], &versioned))
    return NULL;
  void *m;
  pyobject *cap;
  if (versioned) {
    if (devmm_tensor_to_dlpack_versioned(t, (uint64_t)flags, (devmm_dlmanaged_versioned **)&m))
      return none_ref();
    cap = py.capsule_new(m, devmm_capsule_name_versioned,
                         (void (*)(pyobject *))devmm_capsule_destructor_versioned);
    if (!cap)
      ((devmm_dlmanaged_versioned *)m)->deleter(m);
  } else {
    if (devmm_tensor_to_dlpack(t, (devmm_dlmanaged **)&m))
      return none_ref();
    cap = py.capsule_new(m, devmm_capsule_name, (void (*)(pyobject *))devmm_capsule_destructor);
    if (!cap)
      ((devmm_dlmanaged *)m)->deleter(m);
  }
  return cap; /* NULL only with Python's MemoryError set */
}

/* constants() -> {name: value} of the C constants a front end needs */
#define CONSTANT(name)                                                                             \
  { #name, (long long)(name) }
#define STATUS(name, value, text) {"DEVMM_" #name, value},
static const struct {
  const char *name;
  long long value;
} constants[] = {
    CONSTANT(DEVMM_DEVICE_CPU),
    CONSTANT(DEVMM_DEVICE_CUDA),
    CONSTANT(DEVMM_DEVICE_CUDA_HOST),
    CONSTANT(DEVMM_DEVICE_ROCM),
    CONSTANT(DEVMM_DEVICE_ROCM_HOST),
    CONSTANT(DEVMM_DEVICE_CUDA_MANAGED),
    CONSTANT(DEVMM_DEVICE_SIM),
    {"DEVMM_STREAM_ALL", (long long)(intptr_t)DEVMM_STREAM_ALL},
    CONSTANT(DEVMM_RESOURCE_THREAD_SAFE),
    CONSTANT(DEVMM_RESOURCE_HOST_ACCESSIBLE),
    CONSTANT(DEVMM_STATISTICS_SHARDED),
    CONSTANT(DEVMM_DLPACK_MAJOR),
    CONSTANT(DEVMM_DLPACK_MINOR),
    CONSTANT(DEVMM_DLPACK_FLAG_READ_ONLY),
    CONSTANT(DEVMM_DLPACK_FLAG_IS_COPIED),
    CONSTANT(DEVMM_DLPACK_FLAG_IS_SUBBYTE_TYPE_PADDED),
    CONSTANT(DEVMM_MAX_NDIM),
    CONSTANT(DEVMM_MAX_ALIGNMENT),
    CONSTANT(DEVMM_TRACKING_MAX_FRAMES),
    CONSTANT(DEVMM_LOG_ALLOCATE),
    CONSTANT(DEVMM_LOG_FREE),
    CONSTANT(DEVMM_LOG_ALLOCATE_FAILURE),
    CONSTANT(DEVMM_LOG_FREE_FAILURE),
    CONSTANT(DEVMM_OOM_LARGEST),
    DEVMM_STATUS_MAP(STATUS) /* every status code, from the one table */
};
#undef STATUS
#undef CONSTANT

static pyobject *f_constants(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self, (void)args;
  if (!arity(nargs, 0, "constants"))
    return NULL;
  pyobject *d = py.dict_new();
  for (size_t i = 0; d && i < sizeof constants / sizeof constants[0]; i++) {
    pyobject *v = py.from_long_long(constants[i].value);
    int rc = v ? py.dict_set_item_string(d, constants[i].name, v) : -1;
    if (v)
      py.decref(v);
    if (rc) {
      py.decref(d);
      d = NULL;
    }
  }
  return d;
}

static method_def functions[] = {
    {"empty", (void *)f_empty, METH_FASTCALL, "A new tensor capsule (devmm_ffi_tensor_empty)."},
    {"own_tensor", (void *)f_own_tensor, METH_FASTCALL, "Takes over a devmm_tensor *."},
    {"own_buffer", (void *)f_own_buffer, METH_FASTCALL, "Takes over a devmm_buffer reference."},
    {"own_resource", (void *)f_own_resource, METH_FASTCALL, "Takes over a resource reference."},
    {"handle", (void *)f_handle, METH_FASTCALL, "The address a tensor or buffer capsule owns."},
    {"buffer_of", (void *)f_buffer_of, METH_FASTCALL, "The buffer of a tensor or buffer capsule."},
    {"buffer_free", (void *)f_buffer_free, METH_FASTCALL, "devmm_buffer_free through a capsule."},
    {"hold", (void *)f_hold, METH_FASTCALL, "A capsule holding the buffer's memory."},
    {"dlpack", (void *)f_dlpack, METH_FASTCALL, "A DLPack capsule of a tensor capsule."},
    {"constants", (void *)f_constants, METH_FASTCALL, "The C constants, by name."},
};

void *devmm_ffi_python_function(const char *name) {
  if (!py_load())
    return NULL; /* not reached from Python, which has every symbol */
  for (size_t i = 0; name && i < sizeof functions / sizeof functions[0]; i++)
    if (strcmp(functions[i].name, name) == 0)
      return py.cfunction_new(&functions[i], NULL, NULL);
  devmm_set_error(DEVMM_ENOENT, "devmm_ffi_python_function: no function '%s'",
                  name ? name : "(null)");
  return none_ref();
}
