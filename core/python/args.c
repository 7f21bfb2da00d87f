/* Argument checks shared by the built-ins (python_internal.h): each checks a Python type by
 * pointer and an integer's range, and raises TypeError, OverflowError or ValueError naming the
 * function, the argument and what was expected. */
#include "python_internal.h"

#include <stdio.h>
#include <string.h>

pyobject *devmm__py_none_ref(void) {
  devmm__py.incref(devmm__py.none);
  return devmm__py.none;
}

int devmm__py_arity(py_ssize_t nargs, py_ssize_t want, const char *fn) {
  if (nargs == want)
    return 1;
  char msg[96];
  snprintf(msg, sizeof msg, "%s() takes %d arguments (%d given)", fn, (int)want, (int)nargs);
  devmm__py.err_set_string(*devmm__py.type_error, msg);
  return 0;
}

/* Raises exc with "fn(): <what> must be <expected>" and answers 0. */
int devmm__py_arg_error(pyobject *exc, const char *fn, const char *what, const char *expected) {
  char msg[160];
  snprintf(msg, sizeof msg, "%s(): %s must be %s", fn, what, expected);
  devmm__py.err_set_string(exc, msg);
  return 0;
}

/* An int (or a bool where `bools`) within [lo, hi]: TypeError or OverflowError otherwise. */
int devmm__py_int_in(pyobject *o, long long lo, long long hi, int bools, long long *out,
                     const char *fn, const char *what, const char *range) {
  pyobject *t = type_of(o);
  if (t != devmm__py.long_type && (!bools || t != devmm__py.bool_type))
    return devmm__py_arg_error(*devmm__py.type_error, fn, what, "an int");
  *out = devmm__py.as_long_long(o);
  if (*out == -1 && devmm__py.err_occurred())
    devmm__py.err_clear();
  else if (*out >= lo && *out <= hi)
    return 1;
  return devmm__py_arg_error(*devmm__py.overflow_error, fn, what, range);
}

/* An int in [0, 2**64): TypeError or OverflowError (naming `expected`) otherwise. */
static int u64_arg(pyobject *o, unsigned long long *out, const char *fn, const char *what,
                   const char *expected) {
  if (type_of(o) != devmm__py.long_type)
    return devmm__py_arg_error(*devmm__py.type_error, fn, what, expected);
  *out = devmm__py.as_unsigned_long_long(o);
  if (*out == (unsigned long long)-1 && devmm__py.err_occurred()) {
    devmm__py.err_clear();
    return devmm__py_arg_error(*devmm__py.overflow_error, fn, what, expected);
  }
  return 1;
}

/* An address: an int in [0, 2**64), or NULL for None. Trusted beyond that. */
int devmm__py_addr_arg(pyobject *o, void **out, const char *fn, const char *what) {
  unsigned long long v = 0;
  if (o != devmm__py.none && !u64_arg(o, &v, fn, what, "an int address in [0, 2**64) or None"))
    return 0;
  *out = (void *)(uintptr_t)v;
  return 1;
}

/* A size: an int in [0, 2**64), as size_t holds it. */
int devmm__py_size_arg(pyobject *o, size_t *out, const char *fn, const char *what) {
  unsigned long long v;
  if (!u64_arg(o, &v, fn, what, "an int in [0, 2**64)"))
    return 0;
  *out = (size_t)v;
  return 1;
}

/* A tuple: its size, or -1 with TypeError. */
py_ssize_t devmm__py_tuple_arg(pyobject *o, const char *fn, const char *what) {
  if (type_of(o) != devmm__py.tuple_type) {
    devmm__py_arg_error(*devmm__py.type_error, fn, what, "a tuple");
    return -1;
  }
  return devmm__py.tuple_size(o);
}
