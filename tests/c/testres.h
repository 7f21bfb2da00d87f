/* A resource defined by the tests, over malloc/posix_memalign, with failure injection.
 * (Real CPU memory; it serves the core's tests independently of the cpu plugin.) */
#ifndef DEVMM_TESTRES_H
#define DEVMM_TESTRES_H

#include <devmm/devmm.h>
#include <stdatomic.h>

typedef struct testres {
  atomic_long allocs, frees, live_bytes;
  atomic_long fail_at;   /* fail the allocation with this 1-based index (0: never) */
  atomic_long fail_from; /* fail every allocation from this index on (0: never) */
  int destroyed_flag;
  int *destroyed; /* set to 1 when the resource is destroyed (optional) */
} testres;

/* A thread-safe malloc resource on cpu:0 named "test.malloc"; *state observes it. */
devmm_resource *testres_create(testres **state);
/* Asserts the last error message contains needle (prints both on failure). */
#define ck_assert_error_contains(needle)                                                           \
  ck_assert_msg(strstr(devmm_last_error(), (needle)) != NULL, "error '%s' does not contain '%s'",  \
                devmm_last_error(), (needle))

#endif
