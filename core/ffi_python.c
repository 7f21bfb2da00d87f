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
 * Every built-in runs with the GIL held (a built-in is only ever called by Python), so the
 * table of Python functions is filled once, by the first call, and read without a lock after.
 * The trampolines of Python-defined resources may run on any thread: they take the GIL.
 *
 * Arguments: the built-ins check the Python type of every argument (a pointer comparison: the
 * object layout of the stable ABI is checked once, at load) and the range of every integer, so
 * a wrong call raises TypeError, OverflowError or ValueError instead of crashing. An address
 * (a resource, a layout, an object to take over) is trusted as it is: Python cannot prove what
 * an int points at. Only devmm's own modules pass addresses, from the C calls that made them.
 *
 * Python exceptions: a destructor that CPython runs may run while an exception is being
 * raised, and releasing a devmm object may call back into Python (a Python-defined resource's
 * deallocate). Everything here that can do so saves the pending exception and restores it. */
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
  pyobject *(*dict_new)(void);
  int (*dict_set_item_string)(pyobject *, const char *, pyobject *);
  unsigned long long (*as_unsigned_long_long)(pyobject *);
  pyobject *(*tuple_new)(py_ssize_t);
  int (*tuple_set_item)(pyobject *, py_ssize_t, pyobject *);
  pyobject *(*from_unsigned_long_long)(unsigned long long);
  pyobject *(*object_type)(pyobject *);
  pyobject *(*call_object)(pyobject *, pyobject *);
  int (*is_true)(pyobject *);
  void (*err_clear)(void);
  void (*err_fetch)(pyobject **, pyobject **, pyobject **);
  void (*err_restore)(pyobject *, pyobject *, pyobject *);
  void (*err_write_unraisable)(pyobject *);
  int (*gil_ensure)(void);
  void (*gil_release)(int);
  pyobject *(*type_from_spec)(void *);
  void *(*type_get_slot)(pyobject *, int);
  pyobject *(*generic_alloc)(pyobject *, py_ssize_t);
  int (*buffer_fill_info)(void *, pyobject *, void *, py_ssize_t, int, int);
  pyobject *(*unicode_from_format)(const char *, ...);
  pyobject **overflow_error;                                   /* &PyExc_OverflowError */
  pyobject **value_error;                                      /* &PyExc_ValueError */
  pyobject *long_type, *bool_type, *tuple_type, *capsule_type; /* &PyLong_Type, ... */
  pyobject *bool_true;                                         /* &_Py_TrueStruct */
  /* optional (3.12+): the pending exception as one object */
  pyobject *(*err_get_raised)(void);
  void (*err_set_raised)(pyobject *);
  pyobject *none;
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
    SYM(dict_new, "PyDict_New"),
    SYM(dict_set_item_string, "PyDict_SetItemString"),
    SYM(as_unsigned_long_long, "PyLong_AsUnsignedLongLong"),
    SYM(tuple_new, "PyTuple_New"),
    SYM(tuple_set_item, "PyTuple_SetItem"),
    SYM(from_unsigned_long_long, "PyLong_FromUnsignedLongLong"),
    SYM(object_type, "PyObject_Type"),
    SYM(call_object, "PyObject_CallObject"),
    SYM(is_true, "PyObject_IsTrue"),
    SYM(err_clear, "PyErr_Clear"),
    SYM(err_fetch, "PyErr_Fetch"),
    SYM(err_restore, "PyErr_Restore"),
    SYM(err_write_unraisable, "PyErr_WriteUnraisable"),
    SYM(gil_ensure, "PyGILState_Ensure"),
    SYM(gil_release, "PyGILState_Release"),
    SYM(type_from_spec, "PyType_FromSpec"),
    SYM(type_get_slot, "PyType_GetSlot"),
    SYM(generic_alloc, "PyType_GenericAlloc"),
    SYM(buffer_fill_info, "PyBuffer_FillInfo"),
    SYM(unicode_from_format, "PyUnicode_FromFormat"),
    SYM(overflow_error, "PyExc_OverflowError"),
    SYM(value_error, "PyExc_ValueError"),
    SYM(long_type, "PyLong_Type"),
    SYM(bool_type, "PyBool_Type"),
    SYM(tuple_type, "PyTuple_Type"),
    SYM(capsule_type, "PyCapsule_Type"),
    SYM(bool_true, "_Py_TrueStruct"),
#undef SYM
};

/* The type of o, read as the stable ABI's inline Py_TYPE does: the object header is
 * (Py_ssize_t refcount, PyTypeObject *type). py_load checks that layout against PyObject_Type. */
static pyobject *type_of(pyobject *o) { return ((pyobject *const *)o)[1]; }

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
  void *none = dlsym(RTLD_DEFAULT, "_Py_NoneStruct");
  pyobject *(*object_type)(pyobject *) = dlsym(RTLD_DEFAULT, "PyObject_Type");
  void (*decref)(pyobject *) = dlsym(RTLD_DEFAULT, "Py_DecRef");
  pyobject *none_type = none && object_type && decref ? object_type(none) : NULL;
  int stable_layout = none_type && type_of(none) == none_type;
  if (none_type)
    decref(none_type);
  if (!none || !stable_layout) {
    devmm_set_error(DEVMM_ENOTSUP, "devmm_ffi_python_function: this Python's objects are not "
                                   "laid out as its stable ABI says (a free-threaded build?)");
    return 0;
  }
  for (size_t i = 0; i < sizeof py_symbols / sizeof py_symbols[0]; i++)
    memcpy((char *)&py + py_symbols[i].offset, &found[i], sizeof(void *));
  py.err_get_raised = (pyobject * (*)(void)) dlsym(RTLD_DEFAULT, "PyErr_GetRaisedException");
  py.err_set_raised = (void (*)(pyobject *))dlsym(RTLD_DEFAULT, "PyErr_SetRaisedException");
  if (!py.err_get_raised || !py.err_set_raised)
    py.err_get_raised = NULL, py.err_set_raised = NULL;
  py.none = none; /* last: it says the table is complete */
  return 1;
}

/* ---------------------------------------------------------------- the pending exception */

int devmm__pyexc_save(devmm__pyexc *saved) {
  saved->type = saved->value = saved->traceback = NULL;
  if (!py_load() || !py.err_occurred())
    return 0;
  if (py.err_get_raised)
    saved->value = py.err_get_raised();
  else
    py.err_fetch((pyobject **)&saved->type, (pyobject **)&saved->value,
                 (pyobject **)&saved->traceback);
  return 1;
}

void devmm__pyexc_restore(devmm__pyexc *saved) {
  if (py.err_occurred()) /* what ran in between raised anyway: it can only be reported */
    py.err_write_unraisable(py.none);
  if (py.err_get_raised)
    py.err_set_raised(saved->value);
  else
    py.err_restore(saved->type, saved->value, saved->traceback);
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

/* Raises exc with "fn(): <what> must be <expected>" and answers 0. */
static int arg_error(pyobject *exc, const char *fn, const char *what, const char *expected) {
  char msg[160];
  snprintf(msg, sizeof msg, "%s(): %s must be %s", fn, what, expected);
  py.err_set_string(exc, msg);
  return 0;
}

/* An int (or a bool where `bools`) within [lo, hi]: TypeError or OverflowError otherwise. */
static int int_in(pyobject *o, long long lo, long long hi, int bools, long long *out,
                  const char *fn, const char *what, const char *range) {
  pyobject *t = type_of(o);
  if (t != py.long_type && (!bools || t != py.bool_type))
    return arg_error(*py.type_error, fn, what, "an int");
  *out = py.as_long_long(o);
  if (*out == -1 && py.err_occurred())
    py.err_clear();
  else if (*out >= lo && *out <= hi)
    return 1;
  return arg_error(*py.overflow_error, fn, what, range);
}

/* An int in [0, 2**64): TypeError or OverflowError (naming `expected`) otherwise. */
static int u64_arg(pyobject *o, unsigned long long *out, const char *fn, const char *what,
                   const char *expected) {
  if (type_of(o) != py.long_type)
    return arg_error(*py.type_error, fn, what, expected);
  *out = py.as_unsigned_long_long(o);
  if (*out == (unsigned long long)-1 && py.err_occurred()) {
    py.err_clear();
    return arg_error(*py.overflow_error, fn, what, expected);
  }
  return 1;
}

/* An address: an int in [0, 2**64), or NULL for None. Trusted beyond that. */
static int addr_arg(pyobject *o, void **out, const char *fn, const char *what) {
  unsigned long long v = 0;
  if (o != py.none && !u64_arg(o, &v, fn, what, "an int address in [0, 2**64) or None"))
    return 0;
  *out = (void *)(uintptr_t)v;
  return 1;
}

/* A size: an int in [0, 2**64), as size_t holds it. */
static int size_arg(pyobject *o, size_t *out, const char *fn, const char *what) {
  unsigned long long v;
  if (!u64_arg(o, &v, fn, what, "an int in [0, 2**64)"))
    return 0;
  *out = (size_t)v;
  return 1;
}

/* A tuple: its size, or -1 with TypeError. */
static py_ssize_t tuple_arg(pyobject *o, const char *fn, const char *what) {
  if (type_of(o) != py.tuple_type) {
    arg_error(*py.type_error, fn, what, "a tuple");
    return -1;
  }
  return py.tuple_size(o);
}

/* ---------------------------------------------------------------- capsules: C-owned objects */

static const char tensor_name[] = "devmm.tensor";     /* owns a devmm_tensor */
static const char buffer_name[] = "devmm.buffer";     /* owns a reference to a devmm_buffer */
static const char hold_name[] = "devmm.hold";         /* owns a hold on a devmm_buffer's memory */
static const char resource_name[] = "devmm.resource"; /* owns a reference to a resource */

/* Destructors: CPython may run them while an exception is being raised, and releasing the
 * object may call a Python-defined resource back (its deallocate). */
#define GUARDED(release)                                                                           \
  do {                                                                                             \
    devmm__pyexc saved;                                                                            \
    if (DEVMM__UNLIKELY(py.err_occurred())) {                                                      \
      devmm__pyexc_save(&saved);                                                                   \
      release;                                                                                     \
      devmm__pyexc_restore(&saved);                                                                \
    } else {                                                                                       \
      release;                                                                                     \
    }                                                                                              \
  } while (0)

static void tensor_capsule_free(pyobject *cap) {
  GUARDED(devmm_tensor_destroy(py.capsule_get_pointer(cap, tensor_name)));
}
static void buffer_capsule_free(pyobject *cap) {
  GUARDED(devmm_buffer_release(py.capsule_get_pointer(cap, buffer_name)));
}
static void hold_capsule_free(pyobject *cap) {
  GUARDED(devmm_buffer_unacquire(py.capsule_get_pointer(cap, hold_name)));
}
static void resource_capsule_free(pyobject *cap) {
  GUARDED(devmm_resource_release(py.capsule_get_pointer(cap, resource_name)));
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

/* The object of a capsule named name (NULL with TypeError for anything else). */
static void *capsule_arg(pyobject *o, const char *name, const char *fn) {
  void *p = type_of(o) == py.capsule_type ? py.capsule_get_pointer(o, name) : NULL;
  if (!p) {
    if (py.err_occurred())
      py.err_clear();
    char msg[128];
    snprintf(msg, sizeof msg, "%s(): expected a \"%s\" capsule", fn, name);
    py.err_set_string(*py.type_error, msg);
  }
  return p;
}

/* The tensor of a tensor capsule, or the buffer of a tensor or buffer capsule (NULL with
 * TypeError for anything else). */
static devmm_tensor *tensor_of(pyobject *cap, const char *fn) {
  return capsule_arg(cap, tensor_name, fn);
}
static devmm_buffer *buffer_of(pyobject *cap, const char *fn) {
  if (type_of(cap) == py.capsule_type && py.capsule_is_valid(cap, tensor_name))
    return devmm_tensor_buffer(py.capsule_get_pointer(cap, tensor_name));
  if (type_of(cap) == py.capsule_type && py.capsule_is_valid(cap, buffer_name))
    return py.capsule_get_pointer(cap, buffer_name);
  char msg[128];
  snprintf(msg, sizeof msg, "%s(): expected a \"devmm.tensor\" or \"devmm.buffer\" capsule", fn);
  py.err_set_string(*py.type_error, msg);
  return NULL;
}

/* ---------------------------------------------------------------- the built-ins */

#define I32 "an int in [-2**31, 2**31)"

/* empty(resource: int | None, device: (type, id), layout: int | None, shape: tuple of ints,
 *       dtype: packed int, stream: int | None) -> tensor capsule, or None (devmm's error set).
 * Shape entries must be ints themselves (not bools, not other integer types): the front end
 * normalises anything else and calls again. */
static pyobject *f_empty(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  static const char fn[] = "empty";
  void *r, *layout, *stream;
  long long type, id, dtype, v;
  if (!arity(nargs, 6, fn) || !addr_arg(args[0], &r, fn, "resource") ||
      !addr_arg(args[2], &layout, fn, "layout") ||
      !int_in(args[4], 0, UINT32_MAX, 0, &dtype, fn, "dtype", "a packed dtype (uint32)") ||
      !addr_arg(args[5], &stream, fn, "stream"))
    return NULL;
  py_ssize_t n = tuple_arg(args[1], fn, "device");
  if (n >= 0 && n != 2)
    arg_error(*py.type_error, fn, "device", "a (type, id) tuple");
  if (n != 2 ||
      !int_in(py.tuple_get_item(args[1], 0), INT32_MIN, INT32_MAX, 0, &type, fn, "device type",
              I32) ||
      !int_in(py.tuple_get_item(args[1], 1), INT32_MIN, INT32_MAX, 0, &id, fn, "device id", I32))
    return NULL;
  if ((n = tuple_arg(args[3], fn, "shape")) < 0)
    return NULL;
  if (n > DEVMM_MAX_NDIM) {
    devmm_set_error(DEVMM_EINVAL, "empty: %d dimensions, at most %d are supported", (int)n,
                    DEVMM_MAX_NDIM);
    return none_ref();
  }
  int64_t shape[DEVMM_MAX_NDIM];
  for (py_ssize_t i = 0; i < n; i++) {
    if (!int_in(py.tuple_get_item(args[3], i), INT64_MIN, INT64_MAX, 0, &v, fn, "shape entries",
                "ints in int64"))
      return NULL; /* the front end normalises the shape, or says which entry */
    shape[i] = v;
  }
  int64_t device = (int64_t)((uint64_t)(uint32_t)type << 32 | (uint32_t)id);
  devmm_tensor *t =
      devmm_ffi_tensor_empty(r, device, layout, (int)n, shape, (uint32_t)dtype, stream);
  return t ? own(t, tensor_name, tensor_capsule_free, undo_tensor) : none_ref();
}

/* own_tensor(address) / own_buffer(address) / own_resource(address) -> capsule: takes over a
 * tensor, or a buffer or resource reference, that a C call returned (the address is trusted:
 * each must be taken over once). */
static pyobject *own_arg(pyobject *const *args, py_ssize_t nargs, const char *fn, const char *name,
                         void (*destroy)(pyobject *), void (*undo)(void *)) {
  void *p;
  if (!arity(nargs, 1, fn) || !addr_arg(args[0], &p, fn, "the address"))
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
  void *p = NULL;
  if (type_of(args[0]) == py.capsule_type && py.capsule_is_valid(args[0], tensor_name))
    p = py.capsule_get_pointer(args[0], tensor_name);
  else if (type_of(args[0]) == py.capsule_type && py.capsule_is_valid(args[0], buffer_name))
    p = py.capsule_get_pointer(args[0], buffer_name);
  else
    py.err_set_string(*py.type_error,
                      "handle(): expected a \"devmm.tensor\" or \"devmm.buffer\" capsule");
  return p ? py.from_void_ptr(p) : NULL;
}

/* buffer_of(capsule) -> the address of the buffer of a tensor or buffer capsule */
static pyobject *f_buffer_of(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  devmm_buffer *b = arity(nargs, 1, "buffer_of") ? buffer_of(args[0], "buffer_of") : NULL;
  return b ? py.from_void_ptr(b) : NULL;
}

/* buffer_free(capsule): the owner gives up the memory of a tensor's or a buffer's buffer */
static pyobject *f_buffer_free(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  devmm_buffer *b = arity(nargs, 1, "buffer_free") ? buffer_of(args[0], "buffer_free") : NULL;
  if (!b)
    return NULL;
  devmm_buffer_free(b); /* may call a Python-defined resource back: it saves nothing pending */
  return none_ref();
}

/* buffer(resource, nbytes, alignment, stream) -> a buffer capsule (devmm.Buffer): aligned as a
 * tensor is by default (ADR 13: the larger of alignment and the device's default, or
 * alignment alone when the resource refuses the default), or None (devmm's error set) */
static pyobject *f_buffer(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  static const char fn[] = "buffer";
  void *r, *stream;
  size_t nbytes, alignment;
  if (!arity(nargs, 4, fn) || !addr_arg(args[0], &r, fn, "resource") ||
      !size_arg(args[1], &nbytes, fn, "nbytes") ||
      !size_arg(args[2], &alignment, fn, "alignment") || !addr_arg(args[3], &stream, fn, "stream"))
    return NULL;
  if (!r) {
    devmm_set_error(DEVMM_EINVAL, "buffer: resource is NULL");
    return none_ref();
  }
  devmm_buffer *b;
  if (devmm__tensor_buffer(r, nbytes, alignment, stream, &b))
    return none_ref();
  return own(b, buffer_name, buffer_capsule_free, undo_buffer);
}

/* hold(capsule) -> (hold capsule, address): a capsule holding the memory of the tensor's or
 * buffer's buffer until it goes (as an export does), and the address of that memory (a
 * tensor's element 0; 0 for a tensor with no elements), both taken in one step: read after the
 * hold, from the buffer itself, so a free() on another thread cannot come in between. None
 * when the owner freed it already (devmm's error set). */
static pyobject *f_hold(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  devmm_buffer *b = arity(nargs, 1, "hold") ? buffer_of(args[0], "hold") : NULL;
  if (!b)
    return NULL;
  if (devmm_buffer_acquire(b) != DEVMM_OK)
    return none_ref();
  char *p = devmm__buffer_held_ptr(b);
  if (py.capsule_is_valid(args[0], tensor_name)) {
    devmm_tensor *t = py.capsule_get_pointer(args[0], tensor_name);
    p = devmm_tensor_size(t) ? p + devmm_tensor_byte_offset(t) : NULL;
  }
  pyobject *cap = own(b, hold_name, hold_capsule_free, undo_hold);
  pyobject *addr = cap ? py.from_void_ptr(p) : NULL, *out = addr ? py.tuple_new(2) : NULL;
  if (!out) {
    if (addr)
      py.decref(addr);
    if (cap)
      py.decref(cap);
    return NULL;
  }
  py.tuple_set_item(out, 0, cap);
  py.tuple_set_item(out, 1, addr);
  return out;
}

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
    py.err_set_string(*py.value_error, "devmm.ArrayExport: holds no memory");
    return -1;
  }
  return py.buffer_fill_info(view, self, e->data, e->len, e->readonly, flags);
}

static pyobject *export_repr(pyobject *self) {
  array_export *e = (array_export *)self;
  return py.unicode_from_format("<devmm.ArrayExport: %zd bytes at %p%s>", e->len, e->data,
                                e->readonly ? ", read-only" : "");
}

static void export_dealloc(pyobject *self) {
  pyobject *type = type_of(self);
  GUARDED(devmm_buffer_unacquire(((array_export *)self)->held));
  ((void (*)(void *))py.type_get_slot(type, Py_tp_free))(self);
  py.decref(type); /* an instance of a heap type holds a reference to it */
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

static pyobject *f_array_export(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  devmm_tensor *t = arity(nargs, 1, "array_export") ? tensor_of(args[0], "array_export") : NULL;
  if (!t || (!export_type && !(export_type = py.type_from_spec(&export_spec))))
    return NULL;
  devmm_buffer *b = devmm_tensor_buffer(t);
  if (!devmm_device_host_accessible(devmm_buffer_device(b))) {
    devmm_set_error(DEVMM_EINVAL, "array_export: %s memory is not host memory",
                    devmm_resource_name(devmm_buffer_resource(b)));
    return none_ref();
  }
  if (devmm_buffer_acquire(b) != DEVMM_OK)
    return none_ref();
  array_export *e = (array_export *)py.generic_alloc(export_type, 0);
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

/* dlpack(tensor capsule, flags, versioned[, as_cpu]) -> a "dltensor_versioned" (versioned
 * true) or "dltensor" capsule owning a new export, or None when the export fails (devmm's
 * error set). as_cpu true labels pinned host memory (cuda_host, rocm_host) as kDLCPU: the same
 * memory, for a consumer that asked for dl_device=(kDLCPU, 0). */
static pyobject *f_dlpack(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  static const char fn[] = "dlpack";
  long long flags;
  if (nargs != 4 && !arity(nargs, 3, fn))
    return NULL;
  devmm_tensor *t = tensor_of(args[0], fn);
  if (!t || !int_in(args[1], 0, INT64_MAX, 0, &flags, fn, "flags", "an int in [0, 2**63)"))
    return NULL;
  /* flags by truth value: max_version[0] >= 1 may be a numpy bool */
  int versioned = args[2] == py.bool_true ? 1 : py.is_true(args[2]);
  int as_cpu = nargs == 4 ? py.is_true(args[3]) : 0;
  if (versioned < 0 || as_cpu < 0)
    return NULL;
  devmm_device d = devmm_buffer_device(devmm_tensor_buffer(t));
  if (as_cpu && d.device_type != DEVMM_DEVICE_CPU && d.device_type != DEVMM_DEVICE_CUDA_HOST &&
      d.device_type != DEVMM_DEVICE_ROCM_HOST) {
    devmm_set_error(DEVMM_EINVAL, "DLPack export: only host memory can go out as kDLCPU");
    return none_ref();
  }
  void *m;
  pyobject *cap;
  devmm_dltensor *dl;
  if (versioned) {
    if (devmm_tensor_to_dlpack_versioned(t, (uint64_t)flags, (devmm_dlmanaged_versioned **)&m))
      return none_ref();
    dl = &((devmm_dlmanaged_versioned *)m)->dl_tensor;
    cap = py.capsule_new(m, devmm_capsule_name_versioned,
                         (void (*)(pyobject *))devmm_capsule_destructor_versioned);
    if (!cap)
      ((devmm_dlmanaged_versioned *)m)->deleter(m);
  } else {
    if (devmm_tensor_to_dlpack(t, (devmm_dlmanaged **)&m))
      return none_ref();
    dl = &((devmm_dlmanaged *)m)->dl_tensor;
    cap = py.capsule_new(m, devmm_capsule_name, (void (*)(pyobject *))devmm_capsule_destructor);
    if (!cap)
      ((devmm_dlmanaged *)m)->deleter(m);
  }
  if (cap && as_cpu)
    dl->device = (devmm_device){DEVMM_DEVICE_CPU, 0};
  return cap; /* NULL only with Python's MemoryError set */
}

/* ---------------------------------------------------------------- Python-defined resources
 * callbacks(allocate, deallocate) -> (allocate_fn, free_fn, destroy_fn, user): the C
 * trampolines of a callback resource (devmm_callback_resource_create) that call two Python
 * functions, and `user`, a new reference to them that destroy_fn(user) releases:
 *   allocate(nbytes, alignment, stream | None) -> address, or 0 with devmm's error set
 *   deallocate(ptr, nbytes, alignment, stream | None) -> 0, or 1 with devmm's error set
 * The trampolines take the GIL (a free may come from any thread, a DLPack deleter or a
 * background free), and keep any exception pending on the thread (a free from a destructor
 * that runs while an exception is being raised) out of the callback and back afterwards. */

/* Calls the Python function `which` of user with (values..., stream | None), with the GIL and
 * the thread's pending exception put aside; its int result, or -1 when it raised or returned
 * no int (devmm's error set). */
static long long call_back(pyobject *user, int which, const char *what,
                           const unsigned long long *values, int n, devmm_stream stream) {
  int gil = py.gil_ensure();
  devmm__pyexc saved;
  int had = devmm__pyexc_save(&saved);
  pyobject *args = py.tuple_new(n + 1), *r = NULL;
  int ok = args != NULL;
  for (int i = 0; ok && i <= n; i++) {
    pyobject *v = i < n    ? py.from_unsigned_long_long(values[i])
                  : stream ? py.from_void_ptr(stream)
                           : none_ref();
    ok = v && py.tuple_set_item(args, i, v) == 0; /* steals v, even on failure */
  }
  if (ok)
    r = py.call_object(py.tuple_get_item(user, which), args);
  if (args)
    py.decref(args);
  long long v = -1;
  if (r && type_of(r) == py.long_type)
    v = py.as_long_long(r); /* -1 with an error for an address past 2**63: no user address */
  if (r)
    py.decref(r);
  if (v == -1 || v < 0) {
    if (py.err_occurred())
      py.err_clear();
    devmm_set_error(DEVMM_ECALLBACK, "the %s callback of a Python resource %s", what,
                    r ? "returned no valid int" : "raised while reporting its error");
    v = -1;
  }
  if (had)
    devmm__pyexc_restore(&saved);
  py.gil_release(gil);
  return v;
}

static int tramp_allocate(void *user, size_t bytes, size_t alignment, devmm_stream stream,
                          void **out) {
  unsigned long long values[] = {bytes, alignment};
  long long v = call_back(user, 0, "allocate", values, 2, stream);
  if (v == -1)
    return DEVMM_ECALLBACK;
  if (v == 0) /* the callback set devmm's error */
    return devmm_last_status() ? devmm_last_status() : DEVMM_ECALLBACK;
  *out = (void *)(uintptr_t)v;
  return DEVMM_OK;
}

static int tramp_free(void *user, void *ptr, size_t bytes, size_t alignment, devmm_stream stream) {
  unsigned long long values[] = {(uintptr_t)ptr, bytes, alignment};
  long long v = call_back(user, 1, "deallocate", values, 3, stream);
  if (v == -1)
    return DEVMM_ECALLBACK;
  if (v == 0)
    return DEVMM_OK;
  return devmm_last_status() ? devmm_last_status() : DEVMM_ECALLBACK; /* it set the error */
}

static void tramp_destroy(void *user) {
  int gil = py.gil_ensure();
  GUARDED(py.decref(user));
  py.gil_release(gil);
}

static pyobject *f_callbacks(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  if (!arity(nargs, 2, "callbacks"))
    return NULL;
  pyobject *user = py.tuple_new(2), *out = user ? py.tuple_new(4) : NULL;
  if (!out) { /* MemoryError set */
    if (user)
      py.decref(user);
    return NULL;
  }
  for (int i = 0; i < 2; i++) {
    py.incref(args[i]);
    py.tuple_set_item(user, i, args[i]); /* steals the reference */
  }
  void *fns[] = {(void *)tramp_allocate, (void *)tramp_free, (void *)tramp_destroy, user};
  for (int i = 0; i < 4; i++) {
    pyobject *v = py.from_void_ptr(fns[i]);
    if (!v || py.tuple_set_item(out, i, v)) {
      py.decref(out);
      py.decref(user);
      return NULL;
    }
  }
  return out; /* `user`'s one reference is destroy_fn's to release (`out` holds its address) */
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
    CONSTANT(DEVMM_IPC_HANDLE_SIZE),
    CONSTANT(DEVMM_IPC_HEADER_SIZE),
    CONSTANT(DEVMM_IPC_KIND_MAX),
    CONSTANT(DEVMM_STATISTICS_SHARDED),
    CONSTANT(DEVMM_DLPACK_MAJOR),
    CONSTANT(DEVMM_DLPACK_MINOR),
    CONSTANT(DEVMM_DLPACK_FLAG_READ_ONLY),
    CONSTANT(DEVMM_DLPACK_FLAG_IS_COPIED),
    CONSTANT(DEVMM_DLPACK_FLAG_IS_SUBBYTE_TYPE_PADDED),
    CONSTANT(DEVMM_MAX_NDIM),
    CONSTANT(DEVMM_MAX_ALIGNMENT),
    CONSTANT(DEVMM_DEFAULT_ALIGNMENT),
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
    {"buffer", (void *)f_buffer, METH_FASTCALL, "A buffer capsule, aligned as tensors are."},
    {"array_export", (void *)f_array_export, METH_FASTCALL, "An ArrayExport of a tensor."},
    {"dlpack", (void *)f_dlpack, METH_FASTCALL, "A DLPack capsule of a tensor capsule."},
    {"callbacks", (void *)f_callbacks, METH_FASTCALL, "Trampolines of a Python resource."},
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
