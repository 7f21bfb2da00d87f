/* Internal declarations of libdevmm: never installed, never included by plugins. */
#ifndef DEVMM_INTERNAL_H
#define DEVMM_INTERNAL_H

#include <devmm/devmm.h>

#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

#define DEVMM__MSG_MAX 512
#define DEVMM__LONG_MSG_MAX 2048 /* an out-of-memory explanation (devmm__set_error_text) */
#define DEVMM__LIKELY(x) __builtin_expect(!!(x), 1)
#define DEVMM__UNLIKELY(x) __builtin_expect(!!(x), 0)
#define DEVMM__CACHELINE 64

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

struct devmm_resource {
  devmm_resource_ops ops; /* copied and normalised: entries past struct_size are NULL */
  void *ctx;
  const void *kind;    /* the ops table given at creation: identifies adaptor types */
  const char *adaptor; /* an adaptor's type name ("statistics", ...), NULL for other resources */
  devmm_resource *upstream;
  atomic_long refs;
  devmm_device device;
  unsigned flags;
  char *name;
};

/* Creates an adaptor resource over upstream (retained), named "<prefix>(<upstream name>)". */
int devmm__adaptor_create(const devmm_resource_ops *ops, void *ctx, devmm_resource *upstream,
                          const char *prefix, devmm_resource **out);
/* Forwarding ops for adaptors: pass the optional operations to the upstream. */
int devmm__forward_mem_info(devmm_resource *self, size_t *f, size_t *t);
int devmm__forward_copy(devmm_resource *self, void *dst, const void *src, size_t bytes,
                        devmm_stream stream);
int devmm__forward_memset(devmm_resource *self, void *dst, int value, size_t bytes,
                          devmm_stream stream);
int devmm__forward_stream_wait(devmm_resource *self, devmm_stream a, devmm_stream b);
int devmm__forward_synchronize(devmm_resource *self, devmm_stream s);
/* 1 if r's memory lives on a device with streams (cuda, cuda_managed, rocm, sim, ...), 0 for
 * host memory (cpu, cuda_host, rocm_host). */
int devmm__has_streams(const devmm_resource *r);
/* Checks that r is an adaptor of the given kind; sets an error naming `what` if not. */
int devmm__check_kind(const devmm_resource *r, const devmm_resource_ops *kind, const char *what);

/* error.c: changes with every devmm_set_error/devmm_clear_error of this thread. */
unsigned devmm__error_seq(void);
/* error.c: a zeroed heap buffer of this thread (slot: DEVMM__HEAP_*), allocated on first use and
 * freed when the thread exits; NULL if out of memory. Static TLS stays small: libdevmm uses the
 * initial-exec model, whose room is limited when the library is dlopen'ed. */
enum { DEVMM__HEAP_MESSAGE, DEVMM__HEAP_OOM, DEVMM__HEAP_SLOTS };
void *devmm__thread_heap(int slot, size_t bytes);
/* error.c: sets the error to text of up to DEVMM__LONG_MSG_MAX - 1 bytes (devmm_set_error keeps
 * messages under DEVMM__MSG_MAX); returns status. */
int devmm__set_error_text(int status, const char *text);

/* oom.c: completes the message of an allocation refused with DEVMM_ENOMEM (see oom.h), called
 * once by devmm_allocate, the outermost call; returns DEVMM_ENOMEM. */
int devmm__explain_oom(devmm_resource *r, size_t bytes, size_t alignment);

/* callback.c: 0 once devmm_callbacks_disable ran (a front end's hooks must not be called). */
int devmm__callbacks_enabled(void);

/* adaptor_tracking.c, for out-of-memory reports: is r a tracking adaptor; the n largest live
 * allocations of tracking adaptor r, largest first (returns how many), with its totals; the text
 * of a context tag ("" if none). */
int devmm__is_tracking(const devmm_resource *r);
size_t devmm__tracking_largest(devmm_resource *r, devmm_allocation_info *out, size_t n,
                               size_t *count, size_t *bytes);
size_t devmm__tracking_describe_tag(devmm_resource *r, uint64_t tag, char *buf, size_t cap);
/* adaptor_statistics.c: the absolute figures of statistics adaptor r (DEVMM_EINVAL if r is not
 * one), without touching the error message. */
int devmm__statistics_peek(devmm_resource *r, devmm_statistics *out);
/* adaptor_limiting.c: in use and limit of limiting adaptor r (DEVMM_EINVAL if not one). */
int devmm__limiting_peek(devmm_resource *r, size_t *allocated, size_t *limit);

/* registry.c: how devmm__registry_replace changes a device's entry. */
typedef enum {
  DEVMM__REGISTRY_CLEAR,   /* remove the entry if it is still `expected` (r unused) */
  DEVMM__REGISTRY_FILL,    /* set r only if the device has none (lazy init: the user's stay) */
  DEVMM__REGISTRY_REPLACE, /* set r whatever the device has (an explicit devmm_init) */
} devmm__registry_mode;
/* Registry update used by init (see devmm__registry_mode). */
int devmm__registry_replace(devmm_device device, devmm_resource *expected, devmm_resource *r,
                            devmm__registry_mode mode);
/* Asked by the registry when a device has no resource: makes sure devmm is initialised (lazily,
 * once) and writes why the device has none into why; returns 1 when it initialised devmm just
 * now (the registry then looks again). The registry knows nothing else of the configuration:
 * config_init.c installs its hook when the library loads. */
typedef int (*devmm__registry_miss_fn)(devmm_device device, char *why, size_t cap);
void devmm__registry_set_miss_hook(devmm__registry_miss_fn fn);

/* tensor.c: a buffer of span bytes from r for a new tensor (or a devmm.Buffer, ADR 24), aligned
 * to the larger of alignment and devmm_tensor_default_alignment(r's device); to alignment alone
 * when r refuses the default with DEVMM_ENOTSUP (ADR 13) or alignment is no power of two. */
int devmm__tensor_buffer(devmm_resource *r, size_t span, size_t alignment, devmm_stream stream,
                         devmm_buffer **out);
/* tensor.c: a buffer owning ptr (nbytes long), which goes back to r (retained) with
 * devmm_deallocate when its last hold goes (ipc.c: an opened mapping). */
int devmm__buffer_wrap(devmm_resource *r, void *ptr, size_t nbytes, devmm_buffer **out);
/* tensor.c: the memory of a buffer the caller holds (devmm_buffer_acquire), whether or not its
 * owner freed it since: devmm_buffer_ptr answers NULL once the owner let go. */
void *devmm__buffer_held_ptr(const devmm_buffer *b);
/* ffi_python.c: the Python exception pending on this thread (the GIL held), put aside around
 * code that may call back into Python from a destructor: save answers 0 (nothing to restore)
 * when none is pending or no Python is loaded. */
typedef struct {
  void *type, *value, *traceback;
} devmm__pyexc;
int devmm__pyexc_save(devmm__pyexc *saved);
void devmm__pyexc_restore(devmm__pyexc *saved);
/* Duplicates a string or returns NULL on allocation failure. */
char *devmm__strdup(const char *s);
/* Monotonic time in nanoseconds. */
uint64_t devmm__now_ns(void);
/* A small stable id for the calling thread (1, 2, 3, ...). */
uint64_t devmm__thread_id(void);

/* env.c: the environment (secure_getenv; NULL if unset or empty) and devmm's log. */
const char *devmm__getenv(const char *name);
/* The installation's plugin directory and default devmm.ini (absolute; "" when a relocatable
 * library cannot find itself). */
const char *devmm__installed_plugin_dir(void);
const char *devmm__installed_config(void);
int devmm__parse_log_level(const char *text);
void devmm__set_log_level(int level);
void devmm__log(int level, const char *who, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void devmm__vlog(int level, const char *who, const char *fmt, va_list ap);
/* size.c */
int devmm__parse_bool(const char *text, int *out);

/* plugin_host.c: the only code that knows libltdl. A loaded plugin stays loaded until exit. */
typedef struct devmm__plugin {
  char *name, *path, *error;
  const devmm_plugin *desc; /* NULL if it failed */
  size_t ndevices;
  devmm_device_info *devices;
  /* host-side copies of desc->kinds, each read up to its own struct_size, the rest zero: code
   * past the loader reads these, never the plugin's (ADR 25) */
  size_t nkinds;
  devmm_resource_kind *kinds;
  int config_failed, config_line; /* its [plugin <name>] options were refused (at that line) */
  int missing; /* no such file in the plugin path (not refused, not broken: simply absent) */
} devmm__plugin;
/* The host service device_total (config_init.c): the total bytes of a device as its owning
 * plugin enumerated it, from the state this thread is building or the current one. */
int devmm__device_total(devmm_device device, size_t *total_bytes);
/* "the factory failed with DEVMM_X (text) and set no message" into buf: a factory that
 * returned `status` without host->set_error. Returns buf. */
const char *devmm__factory_silent(int status, char *buf, size_t cap);
/* The smallest devmm_resource_kind a plugin may give: ABI 1.0's, up to its factory. */
#define DEVMM__KIND_MIN_SIZE (offsetof(devmm_resource_kind, create) + sizeof(void (*)(void)))
/* Loads the plugin `name` (a short name, or an absolute path) searching dirs (NULL-terminated),
 * hands it the options of its [plugin <name>] section (configure) and enumerates its devices.
 * Returns a new record the caller frees with devmm__plugin_free; desc is NULL and error says
 * why when it failed (config_failed when the options were refused). NULL only when out of
 * memory. */
devmm__plugin *devmm__plugin_load(const char *name, const char *const *dirs,
                                  const devmm_option *options, size_t noptions);
void devmm__plugin_free(devmm__plugin *p);
/* Writes p's kinds as a JSON array of {name, description, device_type, options: [{key, help}]}
 * to f, strings through str (the caller's JSON string writer); [] for a failed plugin. */
void devmm__plugin_kinds_json(const devmm__plugin *p, FILE *f, void (*str)(FILE *, const char *));
/* The host services table handed to plugins. */
const devmm_host_services *devmm__host(void);

#endif
