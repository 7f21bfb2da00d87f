/* Internal declarations of libdevmm: never installed, never included by plugins. */
#ifndef DEVMM_INTERNAL_H
#define DEVMM_INTERNAL_H

#include <devmm/devmm.h>

#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>

#define DEVMM__MSG_MAX 512
#define DEVMM__LIKELY(x) __builtin_expect(!!(x), 1)
#define DEVMM__UNLIKELY(x) __builtin_expect(!!(x), 0)
#define DEVMM__CACHELINE 64

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
/* Checks that r is an adaptor of the given kind; sets an error naming `what` if not. */
int devmm__check_kind(const devmm_resource *r, const devmm_resource_ops *kind, const char *what);

/* Registry update used by init: mode 0 clears the device's entry if it is `expected`; mode 1
 * sets r only if the device has none; mode 2 sets r unconditionally. */
int devmm__registry_replace(devmm_device device, devmm_resource *expected, devmm_resource *r,
                            int mode);
/* Hook run by the registry when no resource is set for a device (installed by init.c). */
int devmm__registry_fallback(devmm_device device, devmm_resource **out);

/* tensor.c: a buffer of span bytes from r for a new tensor, aligned to the larger of alignment
 * and devmm_tensor_default_alignment(r's device); to alignment alone when r refuses the
 * default with DEVMM_ENOTSUP (ADR 13). */
int devmm__tensor_buffer(devmm_resource *r, size_t span, size_t alignment, devmm_stream stream,
                         devmm_buffer **out);
/* Duplicates a string or returns NULL on allocation failure. */
char *devmm__strdup(const char *s);
/* Monotonic time in nanoseconds. */
uint64_t devmm__now_ns(void);
/* A small stable id for the calling thread (1, 2, 3, ...). */
uint64_t devmm__thread_id(void);

/* env.c: the environment (secure_getenv; NULL if unset or empty) and devmm's log. */
const char *devmm__getenv(const char *name);
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
} devmm__plugin;
/* Loads the plugin `name` (a short name, or an absolute path) searching dirs (NULL-terminated)
 * and enumerates its devices. Returns a new record the caller frees with
 * devmm__plugin_free; desc is NULL and error says why when it failed. NULL only when out of
 * memory. */
devmm__plugin *devmm__plugin_load(const char *name, const char *const *dirs);
void devmm__plugin_free(devmm__plugin *p);
/* The host services table handed to plugins. */
const devmm_host_services *devmm__host(void);

#endif
