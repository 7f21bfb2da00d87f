/* CPython's stable ABI found at run time (python_internal.h): the table of the functions devmm
 * uses, checked once against the object layout the stable ABI promises, and the pending
 * exception put aside and restored for code that may call back into Python. */
#include "python_internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

devmm__py_api devmm__py;
static const struct {
  const char *symbol;
  size_t offset;
} py_symbols[] = {
#define SYM(field, name)                                                                           \
  { name, offsetof(__typeof__(devmm__py), field) }
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
    SYM(bytes_as_string_and_size, "PyBytes_AsStringAndSize"),
    SYM(module_create, "PyModule_Create2"),
#undef SYM
};

int devmm__py_load(void) {
  if (devmm__py.none)
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
    memcpy((char *)&devmm__py + py_symbols[i].offset, &found[i], sizeof(void *));
  devmm__py.err_get_raised = (pyobject * (*)(void)) dlsym(RTLD_DEFAULT, "PyErr_GetRaisedException");
  devmm__py.err_set_raised = (void (*)(pyobject *))dlsym(RTLD_DEFAULT, "PyErr_SetRaisedException");
  if (!devmm__py.err_get_raised || !devmm__py.err_set_raised)
    devmm__py.err_get_raised = NULL, devmm__py.err_set_raised = NULL;
  devmm__py.none = none; /* last: it says the table is complete */
  return 1;
}

/* ---------------------------------------------------------------- the pending exception */

int devmm__pyexc_save(devmm__pyexc *saved) {
  saved->type = saved->value = saved->traceback = NULL;
  if (!devmm__py_load() || !devmm__py.err_occurred())
    return 0;
  if (devmm__py.err_get_raised)
    saved->value = devmm__py.err_get_raised();
  else
    devmm__py.err_fetch((pyobject **)&saved->type, (pyobject **)&saved->value,
                        (pyobject **)&saved->traceback);
  return 1;
}

void devmm__pyexc_restore(devmm__pyexc *saved) {
  if (devmm__py.err_occurred()) /* what ran in between raised anyway: it can only be reported */
    devmm__py.err_write_unraisable(devmm__py.none);
  if (devmm__py.err_get_raised)
    devmm__py.err_set_raised(saved->value);
  else
    devmm__py.err_restore(saved->type, saved->value, saved->traceback);
}
