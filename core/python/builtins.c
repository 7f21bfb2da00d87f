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
#include "python_internal.h"

#include <stdio.h>
#include <string.h>

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
  if (!devmm__py_arity(nargs, 6, fn) || !devmm__py_addr_arg(args[0], &r, fn, "resource") ||
      !devmm__py_addr_arg(args[2], &layout, fn, "layout") ||
      !devmm__py_int_in(args[4], 0, UINT32_MAX, 0, &dtype, fn, "dtype",
                        "a packed dtype (uint32)") ||
      !devmm__py_addr_arg(args[5], &stream, fn, "stream"))
    return NULL;
  py_ssize_t n = devmm__py_tuple_arg(args[1], fn, "device");
  if (n >= 0 && n != 2)
    devmm__py_arg_error(*devmm__py.type_error, fn, "device", "a (type, id) tuple");
  if (n != 2 ||
      !devmm__py_int_in(devmm__py.tuple_get_item(args[1], 0), INT32_MIN, INT32_MAX, 0, &type, fn,
                        "device type", I32) ||
      !devmm__py_int_in(devmm__py.tuple_get_item(args[1], 1), INT32_MIN, INT32_MAX, 0, &id, fn,
                        "device id", I32))
    return NULL;
  if ((n = devmm__py_tuple_arg(args[3], fn, "shape")) < 0)
    return NULL;
  if (n > DEVMM_MAX_NDIM) {
    devmm_set_error(DEVMM_EINVAL, "empty: %d dimensions, at most %d are supported", (int)n,
                    DEVMM_MAX_NDIM);
    return devmm__py_none_ref();
  }
  int64_t shape[DEVMM_MAX_NDIM];
  for (py_ssize_t i = 0; i < n; i++) {
    if (!devmm__py_int_in(devmm__py.tuple_get_item(args[3], i), INT64_MIN, INT64_MAX, 0, &v, fn,
                          "shape entries", "ints in int64"))
      return NULL; /* the front end normalises the shape, or says which entry */
    shape[i] = v;
  }
  int64_t device = (int64_t)((uint64_t)(uint32_t)type << 32 | (uint32_t)id);
  devmm_tensor *t =
      devmm_ffi_tensor_empty(r, device, layout, (int)n, shape, (uint32_t)dtype, stream);
  return t ? devmm__py_own(t, devmm__py_tensor_name, devmm__py_tensor_capsule_free,
                           devmm__py_undo_tensor)
           : devmm__py_none_ref();
}

/* own_tensor(address) / own_buffer(address) / own_resource(address) -> capsule: takes over a
 * tensor, or a buffer or resource reference, that a C call returned (the address is trusted:
 * each must be taken over once). */
static pyobject *own_arg(pyobject *const *args, py_ssize_t nargs, const char *fn, const char *name,
                         void (*destroy)(pyobject *), void (*undo)(void *)) {
  void *p;
  if (!devmm__py_arity(nargs, 1, fn) || !devmm__py_addr_arg(args[0], &p, fn, "the address"))
    return NULL;
  if (!p) {
    devmm__py.err_set_string(*devmm__py.type_error, "devmm: cannot take over a NULL object");
    return NULL;
  }
  return devmm__py_own(p, name, destroy, undo);
}
static pyobject *f_own_tensor(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  return own_arg(args, nargs, "own_tensor", devmm__py_tensor_name, devmm__py_tensor_capsule_free,
                 devmm__py_undo_tensor);
}
static pyobject *f_own_buffer(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  return own_arg(args, nargs, "own_buffer", devmm__py_buffer_name, devmm__py_buffer_capsule_free,
                 devmm__py_undo_buffer);
}
static pyobject *f_own_resource(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  return own_arg(args, nargs, "own_resource", devmm__py_resource_name,
                 devmm__py_resource_capsule_free, devmm__py_undo_resource);
}

/* handle(capsule) -> the address of its tensor or buffer, for the C API's other calls */
static pyobject *f_handle(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  if (!devmm__py_arity(nargs, 1, "handle"))
    return NULL;
  void *p = NULL;
  if (type_of(args[0]) == devmm__py.capsule_type &&
      devmm__py.capsule_is_valid(args[0], devmm__py_tensor_name))
    p = devmm__py.capsule_get_pointer(args[0], devmm__py_tensor_name);
  else if (type_of(args[0]) == devmm__py.capsule_type &&
           devmm__py.capsule_is_valid(args[0], devmm__py_buffer_name))
    p = devmm__py.capsule_get_pointer(args[0], devmm__py_buffer_name);
  else
    devmm__py.err_set_string(*devmm__py.type_error,
                             "handle(): expected a \"devmm.tensor\" or \"devmm.buffer\" capsule");
  return p ? devmm__py.from_void_ptr(p) : NULL;
}

/* devmm__py_buffer_of(capsule) -> the address of the buffer of a tensor or buffer capsule */
static pyobject *f_buffer_of(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  devmm_buffer *b =
      devmm__py_arity(nargs, 1, "buffer_of") ? devmm__py_buffer_of(args[0], "buffer_of") : NULL;
  return b ? devmm__py.from_void_ptr(b) : NULL;
}

/* buffer_free(capsule): the owner gives up the memory of a tensor's or a buffer's buffer */
static pyobject *f_buffer_free(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  devmm_buffer *b =
      devmm__py_arity(nargs, 1, "buffer_free") ? devmm__py_buffer_of(args[0], "buffer_free") : NULL;
  if (!b)
    return NULL;
  devmm_buffer_free(b); /* may call a Python-defined resource back: it saves nothing pending */
  return devmm__py_none_ref();
}

/* buffer(resource, nbytes, alignment, stream) -> a buffer capsule (devmm.Buffer): aligned as a
 * tensor is by default (ADR 13: the larger of alignment and the device's default, or
 * alignment alone when the resource refuses the default), or None (devmm's error set) */
static pyobject *f_buffer(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  static const char fn[] = "buffer";
  void *r, *stream;
  size_t nbytes, alignment;
  if (!devmm__py_arity(nargs, 4, fn) || !devmm__py_addr_arg(args[0], &r, fn, "resource") ||
      !devmm__py_size_arg(args[1], &nbytes, fn, "nbytes") ||
      !devmm__py_size_arg(args[2], &alignment, fn, "alignment") ||
      !devmm__py_addr_arg(args[3], &stream, fn, "stream"))
    return NULL;
  if (!r) {
    devmm_set_error(DEVMM_EINVAL, "buffer: resource is NULL");
    return devmm__py_none_ref();
  }
  devmm_buffer *b;
  if (devmm__tensor_buffer(r, nbytes, alignment, stream, &b))
    return devmm__py_none_ref();
  return devmm__py_own(b, devmm__py_buffer_name, devmm__py_buffer_capsule_free,
                       devmm__py_undo_buffer);
}

/* hold(capsule) -> (hold capsule, address): a capsule holding the memory of the tensor's or
 * buffer's buffer until it goes (as an export does), and the address of that memory (a
 * tensor's element 0; 0 for a tensor with no elements), both taken in one step: read after the
 * hold, from the buffer itself, so a free() on another thread cannot come in between. None
 * when the owner freed it already (devmm's error set). */
static pyobject *f_hold(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  devmm_buffer *b = devmm__py_arity(nargs, 1, "hold") ? devmm__py_buffer_of(args[0], "hold") : NULL;
  if (!b)
    return NULL;
  if (devmm_buffer_acquire(b) != DEVMM_OK)
    return devmm__py_none_ref();
  char *p = devmm__buffer_held_ptr(b);
  if (devmm__py.capsule_is_valid(args[0], devmm__py_tensor_name)) {
    devmm_tensor *t = devmm__py.capsule_get_pointer(args[0], devmm__py_tensor_name);
    p = devmm_tensor_size(t) ? p + devmm_tensor_byte_offset(t) : NULL;
  }
  pyobject *cap =
      devmm__py_own(b, devmm__py_hold_name, devmm__py_hold_capsule_free, devmm__py_undo_hold);
  pyobject *addr = cap ? devmm__py.from_void_ptr(p) : NULL,
           *out = addr ? devmm__py.tuple_new(2) : NULL;
  if (!out) {
    if (addr)
      devmm__py.decref(addr);
    if (cap)
      devmm__py.decref(cap);
    return NULL;
  }
  devmm__py.tuple_set_item(out, 0, cap);
  devmm__py.tuple_set_item(out, 1, addr);
  return out;
}

/* dlpack(tensor capsule, flags, versioned[, as_cpu]) -> a "dltensor_versioned" (versioned
 * true) or "dltensor" capsule owning a new export, or None when the export fails (devmm's
 * error set). as_cpu true labels pinned host memory (cuda_host, rocm_host, sim_host) as kDLCPU: the
 * same memory, for a consumer that asked for dl_device=(kDLCPU, 0). */
static pyobject *f_dlpack(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  static const char fn[] = "dlpack";
  long long flags;
  if (nargs != 4 && !devmm__py_arity(nargs, 3, fn))
    return NULL;
  devmm_tensor *t = devmm__py_tensor_of(args[0], fn);
  if (!t ||
      !devmm__py_int_in(args[1], 0, INT64_MAX, 0, &flags, fn, "flags", "an int in [0, 2**63)"))
    return NULL;
  /* flags by truth value: max_version[0] >= 1 may be a numpy bool */
  int versioned = args[2] == devmm__py.bool_true ? 1 : devmm__py.is_true(args[2]);
  int as_cpu = nargs == 4 ? devmm__py.is_true(args[3]) : 0;
  if (versioned < 0 || as_cpu < 0)
    return NULL;
  devmm_device d = devmm_buffer_device(devmm_tensor_buffer(t));
  if (as_cpu && d.device_type != DEVMM_DEVICE_CPU && d.device_type != DEVMM_DEVICE_CUDA_HOST &&
      d.device_type != DEVMM_DEVICE_ROCM_HOST && d.device_type != DEVMM_DEVICE_SIM_HOST) {
    devmm_set_error(DEVMM_EINVAL, "DLPack export: only host memory can go out as kDLCPU");
    return devmm__py_none_ref();
  }
  void *m;
  pyobject *cap;
  devmm_dltensor *dl;
  if (versioned) {
    if (devmm_tensor_to_dlpack_versioned(t, (uint64_t)flags, (devmm_dlmanaged_versioned **)&m))
      return devmm__py_none_ref();
    dl = &((devmm_dlmanaged_versioned *)m)->dl_tensor;
    cap = devmm__py.capsule_new(m, devmm_capsule_name_versioned,
                                (void (*)(pyobject *))devmm_capsule_destructor_versioned);
    if (!cap)
      ((devmm_dlmanaged_versioned *)m)->deleter(m);
  } else {
    if (devmm_tensor_to_dlpack(t, (devmm_dlmanaged **)&m))
      return devmm__py_none_ref();
    dl = &((devmm_dlmanaged *)m)->dl_tensor;
    cap = devmm__py.capsule_new(m, devmm_capsule_name,
                                (void (*)(pyobject *))devmm_capsule_destructor);
    if (!cap)
      ((devmm_dlmanaged *)m)->deleter(m);
  }
  if (cap && as_cpu)
    dl->device = (devmm_device){DEVMM_DEVICE_CPU, 0};
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
    CONSTANT(DEVMM_DEVICE_SIM_HOST),
    CONSTANT(DEVMM_DEVICE_SIM_MANAGED),
    CONSTANT(DEVMM_DEVICE_SIM),
    {"DEVMM_STREAM_ALL", (long long)(intptr_t)DEVMM_STREAM_ALL},
    CONSTANT(DEVMM_RESOURCE_THREAD_SAFE),
    CONSTANT(DEVMM_RESOURCE_HOST_ACCESSIBLE),
    CONSTANT(DEVMM_IPC_HANDLE_SIZE),
    CONSTANT(DEVMM_IPC_HEADER_SIZE),
    CONSTANT(DEVMM_IPC_KIND_MAX),
    CONSTANT(DEVMM_IPC_TENSOR_HANDLE_MAX),
    CONSTANT(DEVMM_STATISTICS_SHARDED),
    CONSTANT(DEVMM_FAILURE_CALLBACK_ANY_ERROR),
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
  if (!devmm__py_arity(nargs, 0, "constants"))
    return NULL;
  pyobject *d = devmm__py.dict_new();
  for (size_t i = 0; d && i < sizeof constants / sizeof constants[0]; i++) {
    pyobject *v = devmm__py.from_long_long(constants[i].value);
    int rc = v ? devmm__py.dict_set_item_string(d, constants[i].name, v) : -1;
    if (v)
      devmm__py.decref(v);
    if (rc) {
      devmm__py.decref(d);
      d = NULL;
    }
  }
  return d;
}

/* version() -> str: devmm_version(), for `import devmm` without ctypes (ADR 45) */
static pyobject *f_version(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self, (void)args;
  return devmm__py_arity(nargs, 0, "version") ? devmm__py.unicode_from_format("%s", devmm_version())
                                              : NULL;
}

/* callbacks_disable(): devmm_callbacks_disable(), which devmm registers with atexit */
static pyobject *f_callbacks_disable(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self, (void)args;
  if (!devmm__py_arity(nargs, 0, "callbacks_disable"))
    return NULL;
  devmm_callbacks_disable();
  return devmm__py_none_ref();
}

/* dtype(name: bytes) -> (code, bits, lanes, itemsize, packed) of devmm_dtype_parse, or None
 * (devmm's error set: an unknown name, or one with a NUL byte) */
static pyobject *f_dtype(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  char *name;
  py_ssize_t n;
  if (!devmm__py_arity(nargs, 1, "dtype") ||
      devmm__py.bytes_as_string_and_size(args[0], &name, &n) < 0)
    return NULL; /* TypeError (not bytes), set by CPython */
  devmm_dtype t;
  if ((size_t)n != strlen(name)) {
    devmm_set_error(DEVMM_EINVAL,
                    "dtype: the name has a NUL byte at %zu: expected a name such "
                    "as \"float32\"",
                    strlen(name));
    return devmm__py_none_ref();
  }
  if (devmm_dtype_parse(name, &t) != DEVMM_OK)
    return devmm__py_none_ref();
  long long v[5] = {t.code, t.bits, t.lanes, (long long)devmm_dtype_itemsize(t),
                    (long long)devmm_ffi_dtype_pack(t)};
  pyobject *out = devmm__py.tuple_new(5);
  for (py_ssize_t i = 0; out && i < 5; i++) {
    pyobject *item = devmm__py.from_long_long(v[i]);
    if (!item || devmm__py.tuple_set_item(out, i, item) < 0) { /* set_item steals item */
      devmm__py.decref(out);
      out = NULL;
    }
  }
  return out;
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
    {"array_export", (void *)devmm__py_array_export, METH_FASTCALL, "An ArrayExport of a tensor."},
    {"dlpack", (void *)f_dlpack, METH_FASTCALL, "A DLPack capsule of a tensor capsule."},
    {"callbacks", (void *)devmm__py_callbacks, METH_FASTCALL, "Trampolines of a Python resource."},
    {"constants", (void *)f_constants, METH_FASTCALL, "The C constants, by name."},
    {"version", (void *)f_version, METH_FASTCALL, "devmm_version() as a str."},
    {"dtype", (void *)f_dtype, METH_FASTCALL, "(code, bits, lanes, itemsize, packed) of a name."},
    {"callbacks_disable", (void *)f_callbacks_disable, METH_FASTCALL, "devmm_callbacks_disable()."},
};

void *devmm_ffi_python_function(const char *name) {
  if (!devmm__py_load())
    return NULL; /* not reached from Python, which has every symbol */
  for (size_t i = 0; name && i < sizeof functions / sizeof functions[0]; i++)
    if (strcmp(functions[i].name, name) == 0)
      return devmm__py.cfunction_new(&functions[i], NULL, NULL);
  devmm_set_error(DEVMM_ENOENT, "devmm_ffi_python_function: no function '%s'",
                  name ? name : "(null)");
  return devmm__py_none_ref();
}
