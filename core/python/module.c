/* libdevmm as CPython's extension module devmm._libdevmm (ADR 45): devmm._lib loads this
 * library with the interpreter's own extension loader (_imp.create_dynamic, what importlib's
 * ExtensionFileLoader calls), so that `import devmm` makes the built-ins of builtins.c without
 * importing ctypes (bench_python.py startup). The module has one function,
 * function(name: bytes), which is devmm_ffi_python_function(name). It links nothing either:
 * PyInit__libdevmm finds the stable ABI with the table of capi.c, and returns NULL without an
 * exception (the loader raises SystemError; devmm._lib then loads the library with ctypes and
 * says why) when this Python's objects are not laid out as the stable ABI says. */
#include "python_internal.h"

#include <devmm/ffi.h>

#define METH_O 0x0008
#define PYTHON_ABI_VERSION 3

/* PyModuleDef, as the stable ABI lays it out: PyModuleDef_Base (PyObject_HEAD, m_init,
 * m_index, m_copy), then the definition. PyModule_Create2 sets the type. */
typedef struct {
  py_ssize_t refcnt;
  void *type;
  void *m_init;
  py_ssize_t m_index;
  void *m_copy;
  const char *m_name;
  const char *m_doc;
  py_ssize_t m_size;
  method_def *m_methods;
  void *m_slots, *m_traverse, *m_clear, *m_free;
} module_def;

static pyobject *f_function(pyobject *self, pyobject *name) {
  (void)self;
  char *s;
  if (devmm__py.bytes_as_string_and_size(name, &s, NULL) < 0)
    return NULL; /* TypeError (not bytes) or ValueError (a NUL byte), set by CPython */
  return devmm_ffi_python_function(s);
}

static method_def methods[] = {
    {"function", (void *)f_function, METH_O,
     "function(name: bytes) -> the built-in of that name (devmm_ffi_python_function)."},
    {NULL, NULL, 0, NULL},
};

static module_def definition = {
    .refcnt = 1,
    .m_name = "devmm._libdevmm",
    .m_doc = "libdevmm's CPython built-ins (ADR 45).",
    .m_size = -1,
    .m_methods = methods,
};

DEVMM_API void *PyInit__libdevmm(void) {
  if (!devmm__py_load())
    return NULL;
  return devmm__py.module_create(&definition, PYTHON_ABI_VERSION);
}
