/* core/plugin_host: plugin files found and checked (trust.c, writers.c), loaded with libltdl
 * (load.c, the only code that knows libltdl), and the host services table they get (services.c).
 * Uses core/resource and core/base; the configuration (core/config) drives it. A loaded plugin
 * stays loaded until exit. */
#ifndef DEVMM_PLUGIN_HOST_INTERNAL_H
#define DEVMM_PLUGIN_HOST_INTERNAL_H

#include "../resource/resource_internal.h"

#include <stdio.h>

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
  int missing;       /* no such file in the plugin path (not refused, not broken: simply absent) */
  int32_t lazy_type; /* desc->lazy_device_type: its devices are counted on first use (ADR 38) */
  int enumerated;    /* its devices were counted (at load, or later by devmm__plugin_enumerate) */
} devmm__plugin;

/* The smallest devmm_resource_kind a plugin may give: ABI 1.0's, up to its factory. */
#define DEVMM__KIND_MIN_SIZE (offsetof(devmm_resource_kind, create) + sizeof(void (*)(void)))

/* load.c: loads the plugin `name` (a short name, or an absolute path) searching dirs
 * (NULL-terminated), hands it the options of its [plugin <name>] section (configure) and
 * enumerates its devices. Returns a new record the caller frees with devmm__plugin_free; desc
 * is NULL and error says why when it failed (config_failed when the options were refused).
 * NULL only when out of memory. */
devmm__plugin *devmm__plugin_load(const char *name, const char *const *dirs,
                                  const devmm_option *options, size_t noptions);
void devmm__plugin_free(devmm__plugin *p);
/* load.c: counts and describes a loaded plugin's devices, once (devmm__plugin_load does it for a
 * plugin without lazy_type; the configuration does it later for one with it). A failure is
 * recorded in p->error ("0 devices: <reason>"), not returned; DEVMM_ENOMEM only when out of
 * memory. */
int devmm__plugin_enumerate(devmm__plugin *p);
/* load.c: writes p's kinds as a JSON array of {name, description, device_type, options: [{key,
 * help}]} to f, strings through str (the caller's JSON string writer); [] for a failed plugin. */
void devmm__plugin_kinds_json(const devmm__plugin *p, FILE *f, void (*str)(FILE *, const char *));
/* load.c: a formatted message on the heap (NULL when out of memory). */
char *devmm__fmt_dup(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* trust.c: resolves a plugin name to a checked file (the walk of ADR 27 and ADR 39, on
 * descriptors): returns its path, with links resolved, and in *fd an O_PATH descriptor of the
 * very file that was checked, which the caller loads and owns; or returns NULL with *error set
 * (and *missing when no such file is in the path). */
char *devmm__plugin_resolve(const char *name, const char *const *dirs, char **error, int *missing,
                            int *fd);

struct stat;
/* writers.c: NULL if nobody but root and this user may write the open file or directory fd
 * (path and what, "plugin file" or "plugin directory", for the message; st its fstat): mode
 * bits, the group's users, the access ACL and a directory's default ACL. Else the refusal, on
 * the heap: what was wrong and what was expected. */
char *devmm__trust_check_open(const char *what, const char *path, int fd, const struct stat *st);

/* services.c: the host services table handed to plugins. */
const devmm_host_services *devmm__host(void);
/* services.c: the host service device_total answers through this hook (config/init.c installs
 * it when the library loads: the total bytes of a device as its owning plugin enumerated it). */
typedef int (*devmm__device_total_fn)(devmm_device device, size_t *total_bytes);
void devmm__set_device_total_hook(devmm__device_total_fn fn);
/* services.c: "the factory failed with DEVMM_X (text) and set no message" into buf: a factory
 * that returned `status` without host->set_error. Returns buf. */
const char *devmm__factory_silent(int status, char *buf, size_t cap);

#endif
