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
/* Temporary files and directories go under $TMPDIR (else /tmp), never a fixed path. Each fills
 * path (of size n) with "<tmpdir>/devmm-<stem>-XXXXXX", creates it and fails the test if it
 * cannot; testres_mkstemp returns the open descriptor. */
#define TESTRES_PATH_MAX 1024
const char *testres_tmpdir(void);
int testres_mkstemp(char *path, size_t n, const char *stem);
char *testres_mkdtemp(char *path, size_t n, const char *stem);
/* Copies a file (failing the test if it cannot) and gives the copy mode. */
void testres_copy_file(const char *from, const char *to, unsigned mode);
/* Marks the running test as skipped, with the reason (printed, and told to the runner through
 * $DEVMM_TEST_SKIPS). Only for a suite of one test: the runner exits 77 (Meson: SKIP) when every
 * test it ran skipped, and fails a run in which some tests skipped and others did not. */
void testres_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Whether a child running as uid:gid (no supplementary groups) can open path for writing; the
 * test fails if the child cannot become uid:gid (needs root). */
int testres_writable_as(const char *path, unsigned uid, unsigned gid);
/* The whole file as text (the caller frees it; "" for an empty file); fails the test if it
 * cannot be opened. */
char *testres_read_text(const char *path);
/* A host resource whose IPC group (kind `kind`) makes and opens nothing: fills ops and group
 * (malloc/free, IPC ops that succeed doing nothing), for tests of the group's handling. */
void testres_ipc_stub(devmm_resource_ops *ops, devmm_resource_ipc_ops *group, const char *kind);
/* Writes text as the whole file (created or truncated); fails the test if it cannot. */
void testres_write_text(const char *path, const char *text);
/* Asserts the last error message contains needle (prints both on failure). */
#define ck_assert_error_contains(needle)                                                           \
  ck_assert_msg(strstr(devmm_last_error(), (needle)) != NULL, "error '%s' does not contain '%s'",  \
                devmm_last_error(), (needle))

#endif
