/* core/base: what every layer of libdevmm uses (never installed, never included by plugins):
 * the internal error buffers (error.c), the environment and the installation's paths (env.c),
 * devmm's own diagnostics (diag.c), sizes and booleans as devmm.ini writes them (size.c), small
 * helpers and the spinlock (util.c). Nothing here knows resources, tensors or plugins. */
#ifndef DEVMM_BASE_H
#define DEVMM_BASE_H

#include <devmm/devmm.h>

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DEVMM__MSG_MAX 512
#define DEVMM__LONG_MSG_MAX 2048 /* an out-of-memory explanation (devmm__set_error_text) */
#define DEVMM__LIKELY(x) __builtin_expect(!!(x), 1)
#define DEVMM__UNLIKELY(x) __builtin_expect(!!(x), 0)
#define DEVMM__CACHELINE 64

/* ================================================================ util.c */

/* A spinlock for critical sections of a few dozen instructions on the allocation paths (the
 * sharded tracking and limiting adaptors, ADR 29): one atomic exchange to take it and a plain
 * store to give it back (a mutex costs two atomic operations); a waiter yields its CPU after a
 * few dozen spins, in case the holder was preempted. */
typedef struct {
  atomic_int held;
} devmm__spinlock;
void devmm__spin_wait(devmm__spinlock *l);
static inline void devmm__spin_lock(devmm__spinlock *l) {
  if (DEVMM__UNLIKELY(atomic_exchange_explicit(&l->held, 1, memory_order_acquire)))
    devmm__spin_wait(l);
}
static inline void devmm__spin_unlock(devmm__spinlock *l) {
  atomic_store_explicit(&l->held, 0, memory_order_release);
}
/* Duplicates a string or returns NULL on allocation failure. */
char *devmm__strdup(const char *s);
/* Monotonic time in nanoseconds. */
uint64_t devmm__now_ns(void);
/* A small stable id for the calling thread (1, 2, 3, ...). */
uint64_t devmm__thread_id(void);
/* What a file of st_mode mode is, for a message: "a directory", "a FIFO", ... */
const char *devmm__file_type(unsigned mode);

/* ================================================================ outfile.c */

/* How a file devmm writes is opened (ADR 42): what its messages say and what it accepts. */
typedef struct {
  const char *refusing;      /* "logging adaptor: refusing log file" ('path': why: expected) */
  const char *cannot;        /* "logging adaptor: cannot open log file" ('path' for writing: ...) */
  const char *expected_file; /* said of a FIFO, a directory, ... */
  unsigned mode;             /* of a new file */
  int char_devices;          /* a character device (/dev/null) is accepted */
} devmm__output_rules;
struct stat;
/* path opened for writing by rules, not truncated: *fd (blocking) and its fstat *st; the error
 * set on a refusal. */
int devmm__open_output(const char *path, const devmm__output_rules *rules, int *fd,
                       struct stat *st);

/* ================================================================ error.c */

/* Changes with every devmm_set_error/devmm_clear_error of this thread. */
unsigned devmm__error_seq(void);
/* A zeroed heap buffer of this thread (slot: DEVMM__HEAP_*), allocated on first use and freed
 * when the thread exits; NULL if out of memory. Static TLS stays small: libdevmm uses the
 * initial-exec model, whose room is limited when the library is dlopen'ed. */
enum { DEVMM__HEAP_MESSAGE, DEVMM__HEAP_OOM, DEVMM__HEAP_SLOTS };
void *devmm__thread_heap(int slot, size_t bytes);
/* Sets the error to text of up to DEVMM__LONG_MSG_MAX - 1 bytes (devmm_set_error keeps
 * messages under DEVMM__MSG_MAX); returns status. */
int devmm__set_error_text(int status, const char *text);

/* ================================================================ env.c */

/* The environment (secure_getenv; NULL if unset or empty): the only reader of it. */
const char *devmm__getenv(const char *name);
/* The installation's plugin directory and default devmm.ini (absolute; "" when a relocatable
 * library cannot find itself). */
const char *devmm__installed_plugin_dir(void);
const char *devmm__installed_config(void);

/* ================================================================ diag.c */

/* A DEVMM_LOG_* level from its name ("error", "warn"/"warning", "info", "debug"); -1 if none. */
int devmm__diag_parse_level(const char *text);
/* Sets the level (devmm.ini's log_level); before any call DEVMM_LOG_LEVEL decides. */
void devmm__diag_set_level(int level);
/* On: this thread's diagnostics are kept (one "[who: ]level: text" line each) instead of printed,
 * for a caller that reports them itself (devmm_ffi_init); off drops what was kept. */
void devmm__diag_capture(int on);
/* What was kept so far (malloc'd, NULL if nothing); the capture goes on. */
char *devmm__diag_captured(void);
/* One diagnostic line on stderr, "devmm[ who]: level: text", if level is enabled. */
void devmm__diag(int level, const char *who, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void devmm__vdiag(int level, const char *who, const char *fmt, va_list ap);

/* ================================================================ text.c */

/* Whether kind is a plain kind name, "<plugin>.<name>" (more dot-separated words allowed):
 * letters, digits, '_' and '-' between single dots, under 48 bytes; never a path (ADR 40). */
int devmm__kind_name_plain(const char *kind);
/* in (at most max bytes, up to its NUL) for a message or a log line, in out (cap bytes): printable
 * ASCII as it is, a backslash and every other byte as \xNN, "..." when cut short. Returns out. */
const char *devmm__escape(const char *in, size_t max, char *out, size_t cap);

/* ================================================================ size.c */

/* A size as written: bytes, or a percentage of a device's total memory (resolved per device). */
typedef struct {
  int percent;  /* 1: `value` is a percentage (0..100) */
  double value; /* the percentage */
  size_t bytes; /* when not a percentage */
} devmm__size_spec;
/* A size as written in devmm.ini, parsed once, resolved per device. */
int devmm__parse_size_spec(const char *text, devmm__size_spec *out);
int devmm__size_resolve(const devmm__size_spec *spec, const char *text, size_t total, size_t *out);
/* true/yes/on/1 or false/no/off/0 (any case); DEVMM_EINVAL with the message otherwise. */
int devmm__parse_bool(const char *text, int *out);

#endif
