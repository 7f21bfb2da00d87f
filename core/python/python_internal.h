/* core/python: the only folder that knows CPython (ADR 8, ADR 12). libdevmm never links or
 * includes Python: capi.c finds the few functions of CPython's stable ABI it needs at run time
 * (dlsym) into one table, devmm__py, filled by devmm__py_load. Files:
 *   capi.c          the table and its loader; the pending exception put aside
 *   dlpack_capsule.c  the PyCapsule destructors of dlpack.h
 *   args.c          argument checks shared by the built-ins
 *   capsule.c       PyCapsules that own devmm objects
 *   builtins.c      the built-in functions (devmm_ffi_python_function) and the constants
 *   array_export.c  the ArrayExport type (a buffer-protocol object holding a tensor's memory)
 *   trampolines.c   Python-defined resources: C trampolines calling Python functions
 *   ffi.c           the plain-C entry points for foreign-function front ends (ffi.h)
 *   module.c        libdevmm as the extension module devmm._libdevmm (ADR 45)
 * Every built-in runs with the GIL held; the trampolines take it. Uses every layer below. */
#ifndef DEVMM_PYTHON_INTERNAL_H
#define DEVMM_PYTHON_INTERNAL_H

#include "../tensor/tensor_internal.h"

#include <stddef.h>
#include <stdint.h>

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

typedef struct {
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
  int (*bytes_as_string_and_size)(pyobject *, char **, py_ssize_t *);
  pyobject *(*module_create)(void *, int); /* PyModule_Create2 (module.c) */
  /* optional (3.12+): the pending exception as one object */
  pyobject *(*err_get_raised)(void);
  void (*err_set_raised)(pyobject *);
  pyobject *none;
} devmm__py_api;

/* capi.c: the Python exception pending on this thread (the GIL held), put aside around code that
 * may call back into Python from a destructor: save answers 0 (nothing to restore) when none is
 * pending or no Python is loaded. */
typedef struct {
  void *type, *value, *traceback;
} devmm__pyexc;
int devmm__pyexc_save(devmm__pyexc *saved);
void devmm__pyexc_restore(devmm__pyexc *saved);

/* capi.c: the table (complete once devmm__py.none is set) and its loader: 1 when loaded, 0 with
 * devmm's error set when this process has no usable Python. */
extern devmm__py_api devmm__py;
int devmm__py_load(void);

/* The type of o, read as the stable ABI's inline Py_TYPE does: the object header is
 * (Py_ssize_t refcount, PyTypeObject *type). py_load checks that layout against PyObject_Type. */
static inline pyobject *type_of(pyobject *o) { return ((pyobject *const *)o)[1]; }

/* args.c: a new reference to None; 1 if nargs == want, else 0 with TypeError set; an argument
 * error of fn (TypeError etc. naming what and what was expected), returning 0; the argument
 * converters, each 1 on success, 0 with the Python error set. */
pyobject *devmm__py_none_ref(void);
int devmm__py_arity(py_ssize_t nargs, py_ssize_t want, const char *fn);
int devmm__py_arg_error(pyobject *exc, const char *fn, const char *what, const char *expected);
int devmm__py_int_in(pyobject *o, long long lo, long long hi, int bools, long long *out,
                     const char *fn, const char *what, const char *range);
int devmm__py_addr_arg(pyobject *o, void **out, const char *fn, const char *what);
int devmm__py_size_arg(pyobject *o, size_t *out, const char *fn, const char *what);
py_ssize_t devmm__py_tuple_arg(pyobject *o, const char *fn, const char *what);

/* Destructors: CPython may run them while an exception is being raised, and releasing the
 * object may call a Python-defined resource back (its deallocate). */
#define GUARDED(release)                                                                           \
  do {                                                                                             \
    devmm__pyexc saved;                                                                            \
    if (DEVMM__UNLIKELY(devmm__py.err_occurred())) {                                               \
      devmm__pyexc_save(&saved);                                                                   \
      release;                                                                                     \
      devmm__pyexc_restore(&saved);                                                                \
    } else {                                                                                       \
      release;                                                                                     \
    }                                                                                              \
  } while (0)

/* capsule.c: the capsule names, their destructors, the undo of a take-over that failed, and
 * the capsule made to own p (NULL with MemoryError set, p given back through undo). */
extern const char devmm__py_tensor_name[], devmm__py_buffer_name[], devmm__py_hold_name[],
    devmm__py_resource_name[];
void devmm__py_tensor_capsule_free(pyobject *cap);
void devmm__py_buffer_capsule_free(pyobject *cap);
void devmm__py_hold_capsule_free(pyobject *cap);
void devmm__py_resource_capsule_free(pyobject *cap);
void devmm__py_undo_tensor(void *p);
void devmm__py_undo_buffer(void *p);
void devmm__py_undo_hold(void *p);
void devmm__py_undo_resource(void *p);
pyobject *devmm__py_own(void *p, const char *name, void (*destroy)(pyobject *),
                        void (*undo)(void *));
/* capsule.c: the object a capsule of that name owns (NULL with TypeError naming fn). */
void *devmm__py_capsule_arg(pyobject *o, const char *name, const char *fn);
devmm_tensor *devmm__py_tensor_of(pyobject *cap, const char *fn);
devmm_buffer *devmm__py_buffer_of(pyobject *cap, const char *fn);

/* array_export.c: array_export(tensor capsule) -> ArrayExport | None (see the file). */
pyobject *devmm__py_array_export(pyobject *self, pyobject *const *args, py_ssize_t nargs);
/* trampolines.c: callbacks(allocate, deallocate) -> trampolines of a Python resource. */
pyobject *devmm__py_callbacks(pyobject *self, pyobject *const *args, py_ssize_t nargs);

#endif
