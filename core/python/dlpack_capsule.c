/* The PyCapsule destructors of include/devmm/dlpack.h (devmm_capsule_destructor_versioned,
 * devmm_capsule_destructor), for a front end that wraps an export in a "dltensor_versioned" or
 * "dltensor" capsule: they free an export nobody consumed through its own deleter. CPython's two
 * capsule functions are found with dlsym (libdevmm never links Python). */
#include "python_internal.h"

#include <dlfcn.h>

typedef int (*is_valid_fn)(void *, const char *);
typedef void *(*get_pointer_fn)(void *, const char *);

/* Called by Python with the GIL held, so these lookups need no lock of their own: the
 * interpreter serialises every call. */
static void capsule_free(void *capsule, const char *name, int versioned) {
  static is_valid_fn is_valid;
  static get_pointer_fn get_pointer;
  if (!is_valid) {
    get_pointer = (get_pointer_fn)dlsym(RTLD_DEFAULT, "PyCapsule_GetPointer");
    is_valid = (is_valid_fn)dlsym(RTLD_DEFAULT, "PyCapsule_IsValid");
    if (!is_valid || !get_pointer)
      return; /* no Python in this process: nothing can have made a capsule */
  }
  if (!is_valid(capsule, name))
    return; /* consumed ("used_dltensor...") or not ours */
  void *p = get_pointer(capsule, name);
  /* CPython may run this while an exception is being raised; the last hold may call a
   * Python-defined resource back: put the exception aside meanwhile */
  devmm__pyexc saved;
  int had = devmm__pyexc_save(&saved);
  if (versioned) {
    devmm_dlmanaged_versioned *m = p;
    if (m->deleter)
      m->deleter(m);
  } else {
    devmm_dlmanaged *m = p;
    if (m->deleter)
      m->deleter(m);
  }
  if (had)
    devmm__pyexc_restore(&saved);
}

void devmm_capsule_destructor_versioned(void *capsule) {
  capsule_free(capsule, devmm_capsule_name_versioned, 1);
}

void devmm_capsule_destructor(void *capsule) { capsule_free(capsule, devmm_capsule_name, 0); }
