/* PyCapsules that own devmm objects (python_internal.h): the Python objects that keep one need
 * no __del__ (ADR 12). */
#include "python_internal.h"

#include <stdio.h>
#include <string.h>

const char devmm__py_tensor_name[] = "devmm.tensor"; /* owns a devmm_tensor */
const char devmm__py_buffer_name[] = "devmm.buffer"; /* owns a reference to a devmm_buffer */
const char devmm__py_hold_name[] = "devmm.hold";     /* owns a hold on a devmm_buffer's memory */
const char devmm__py_resource_name[] = "devmm.resource"; /* owns a reference to a resource */

void devmm__py_tensor_capsule_free(pyobject *cap) {
  GUARDED(devmm_tensor_destroy(devmm__py.capsule_get_pointer(cap, devmm__py_tensor_name)));
}
void devmm__py_buffer_capsule_free(pyobject *cap) {
  GUARDED(devmm_buffer_release(devmm__py.capsule_get_pointer(cap, devmm__py_buffer_name)));
}
void devmm__py_hold_capsule_free(pyobject *cap) {
  GUARDED(devmm_buffer_unacquire(devmm__py.capsule_get_pointer(cap, devmm__py_hold_name)));
}
void devmm__py_resource_capsule_free(pyobject *cap) {
  GUARDED(devmm_resource_release(devmm__py.capsule_get_pointer(cap, devmm__py_resource_name)));
}

void devmm__py_undo_tensor(void *p) { devmm_tensor_destroy(p); }
void devmm__py_undo_buffer(void *p) { devmm_buffer_release(p); }
void devmm__py_undo_hold(void *p) { devmm_buffer_unacquire(p); }
void devmm__py_undo_resource(void *p) { devmm_resource_release(p); }

/* A capsule owning p; on failure (Python set MemoryError) p is given back with undo. */
pyobject *devmm__py_own(void *p, const char *name, void (*destroy)(pyobject *),
                        void (*undo)(void *)) {
  pyobject *cap = devmm__py.capsule_new(p, name, destroy);
  if (!cap)
    undo(p);
  return cap;
}

/* The object of a capsule named name (NULL with TypeError for anything else). */
static void *capsule_arg(pyobject *o, const char *name, const char *fn) {
  void *p = type_of(o) == devmm__py.capsule_type ? devmm__py.capsule_get_pointer(o, name) : NULL;
  if (!p) {
    if (devmm__py.err_occurred())
      devmm__py.err_clear();
    char msg[128];
    snprintf(msg, sizeof msg, "%s(): expected a \"%s\" capsule", fn, name);
    devmm__py.err_set_string(*devmm__py.type_error, msg);
  }
  return p;
}

/* The tensor of a tensor capsule, or the buffer of a tensor or buffer capsule (NULL with
 * TypeError for anything else). */
devmm_tensor *devmm__py_tensor_of(pyobject *cap, const char *fn) {
  return capsule_arg(cap, devmm__py_tensor_name, fn);
}
devmm_buffer *devmm__py_buffer_of(pyobject *cap, const char *fn) {
  if (type_of(cap) == devmm__py.capsule_type &&
      devmm__py.capsule_is_valid(cap, devmm__py_tensor_name))
    return devmm_tensor_buffer(devmm__py.capsule_get_pointer(cap, devmm__py_tensor_name));
  if (type_of(cap) == devmm__py.capsule_type &&
      devmm__py.capsule_is_valid(cap, devmm__py_buffer_name))
    return devmm__py.capsule_get_pointer(cap, devmm__py_buffer_name);
  char msg[128];
  snprintf(msg, sizeof msg, "%s(): expected a \"devmm.tensor\" or \"devmm.buffer\" capsule", fn);
  devmm__py.err_set_string(*devmm__py.type_error, msg);
  return NULL;
}
