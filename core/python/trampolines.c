#include "python_internal.h"

#include <stdio.h>
#include <string.h>

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
  int gil = devmm__py.gil_ensure();
  devmm__pyexc saved;
  int had = devmm__pyexc_save(&saved);
  pyobject *args = devmm__py.tuple_new(n + 1), *r = NULL;
  int ok = args != NULL;
  for (int i = 0; ok && i <= n; i++) {
    pyobject *v = i < n    ? devmm__py.from_unsigned_long_long(values[i])
                  : stream ? devmm__py.from_void_ptr(stream)
                           : devmm__py_none_ref();
    ok = v && devmm__py.tuple_set_item(args, i, v) == 0; /* steals v, even on failure */
  }
  if (ok)
    r = devmm__py.call_object(devmm__py.tuple_get_item(user, which), args);
  if (args)
    devmm__py.decref(args);
  long long v = -1;
  if (r && type_of(r) == devmm__py.long_type)
    v = devmm__py.as_long_long(r); /* -1 with an error for an address past 2**63: no user address */
  if (r)
    devmm__py.decref(r);
  if (v == -1 || v < 0) {
    if (devmm__py.err_occurred())
      devmm__py.err_clear();
    devmm_set_error(DEVMM_ECALLBACK, "the %s callback of a Python resource %s", what,
                    r ? "returned no valid int" : "raised while reporting its error");
    v = -1;
  }
  if (had)
    devmm__pyexc_restore(&saved);
  devmm__py.gil_release(gil);
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
  int gil = devmm__py.gil_ensure();
  GUARDED(devmm__py.decref(user));
  devmm__py.gil_release(gil);
}

pyobject *devmm__py_callbacks(pyobject *self, pyobject *const *args, py_ssize_t nargs) {
  (void)self;
  if (!devmm__py_arity(nargs, 2, "callbacks"))
    return NULL;
  pyobject *user = devmm__py.tuple_new(2), *out = user ? devmm__py.tuple_new(4) : NULL;
  if (!out) { /* MemoryError set */
    if (user)
      devmm__py.decref(user);
    return NULL;
  }
  for (int i = 0; i < 2; i++) {
    devmm__py.incref(args[i]);
    devmm__py.tuple_set_item(user, i, args[i]); /* steals the reference */
  }
  void *fns[] = {(void *)tramp_allocate, (void *)tramp_free, (void *)tramp_destroy, user};
  for (int i = 0; i < 4; i++) {
    pyobject *v = devmm__py.from_void_ptr(fns[i]);
    if (!v || devmm__py.tuple_set_item(out, i, v)) {
      devmm__py.decref(out);
      devmm__py.decref(user);
      return NULL;
    }
  }
  return out; /* `user`'s one reference is destroy_fn's to release (`out` holds its address) */
}
