/* devmm — initialisation from devmm.ini, and what it built (plugins, devices, stacks).
 *
 *   if (devmm_init(NULL) != DEVMM_OK) fprintf(stderr, "%s\n", devmm_last_error());
 *   char *json; devmm_info_json(&json); puts(json); devmm_string_free(json);
 *
 * Lookup when path is NULL: $DEVMM_CONFIG, $XDG_CONFIG_HOME/devmm/devmm.ini (default
 * ~/.config), <sysconfdir>/devmm/devmm.ini, then the built-in default (the cpu plugin with
 * cpu.malloc). The environment is ignored in set-uid/set-gid processes. Never the current
 * directory. */
#ifndef DEVMM_CONFIG_H
#define DEVMM_CONFIG_H

#include "export.h"
#include "plugin.h"
#include "size.h" /* devmm_parse_size, declared here before */
#include "text.h" /* devmm_string_free, for devmm_info_json */

#ifdef __cplusplus
extern "C" {
#endif

/* Reads the configuration (path, or the lookup above when NULL), loads its plugins and sets
 * every device's current resource (the first devmm_get_current_resource that finds none runs
 * it with NULL, then filling only devices the user has not set). Errors in the file fail with
 * DEVMM_ECONFIG ("file:line: what, expected ...") and change nothing. A plugin that fails to load
 * is recorded (see devmm_plugin_get) and logged; the others keep working. Calling it again
 * re-initialises. */
DEVMM_API int devmm_init(const char *path);
/* devmm_init from the len bytes of a devmm.ini's text in memory; name stands for it in messages
 * and as devmm_config_source ("<ini text>" if NULL). Relative plugin_path entries start at the
 * working directory now. */
DEVMM_API int devmm_init_text(const char *text, size_t len, const char *name);
/* Clears the current resources devmm_init set (ones the user set stay) and forgets the
 * configuration; plugins stay loaded until exit. */
DEVMM_API void devmm_shutdown(void);
/* 1 once devmm_init succeeded (explicitly or lazily), else 0. */
DEVMM_API int devmm_is_initialized(void);
/* The configuration in use: its path, the name given to devmm_init_text, or "built-in default"
 * ("" before init); valid until the next devmm_init or devmm_shutdown. */
DEVMM_API const char *devmm_config_source(void);
/* The configuration's warning i ("file:line: ...": something it says that has no effect, such as
 * a section for a device no plugin has), or NULL past the end; valid as devmm_config_source.
 * devmm-info --strict fails on any. */
DEVMM_API const char *devmm_config_warning(size_t i);

typedef struct devmm_plugin_status {
  const char *name;    /* as written in the config */
  const char *path;    /* resolved file, or "" if not found */
  const char *version; /* "" if not loaded */
  uint32_t abi_major, abi_minor;
  int loaded;        /* 1 if usable */
  const char *error; /* why it failed to load, or why it has 0 devices ("" if neither) */
  size_t ndevices;
  size_t nkinds;
} devmm_plugin_status;

typedef struct devmm_device_status {
  devmm_device_info info;
  const char *plugin; /* plugin that enumerates it */
  const char *stack;  /* the resource stack, outermost first ("limiting(statistics(cpu.malloc))") */
  const char *error;  /* why no resource could be built ("" if fine) */
} devmm_device_status;

/* Number of plugins named by the configuration. */
DEVMM_API size_t devmm_plugin_count(void);
/* Status of plugin i (strings live until the next devmm_init/devmm_shutdown). */
DEVMM_API int devmm_plugin_get(size_t i, devmm_plugin_status *out);
/* Number of devices enumerated by the loaded plugins. */
DEVMM_API size_t devmm_device_count(void);
/* Status of device i (strings live until the next devmm_init/devmm_shutdown). */
DEVMM_API int devmm_device_get(size_t i, devmm_device_status *out);
/* Device i's error if it is the configuration file's ("file:line: ...", a refused value found
 * when a device counted on first use was counted, ADR 38), else NULL; lives as devmm_device_get's.
 */
DEVMM_API const char *devmm_device_config_error(size_t i);
/* The resource kinds of loaded plugins: name of kind i, or NULL past the end. */
DEVMM_API const char *devmm_kind_name(size_t i);
typedef struct devmm_kind_status {
  const char *name;           /* "<plugin>.<kind>" */
  const char *description;    /* one line ("" if none) */
  const char *plugin;         /* the plugin that offers it */
  int32_t device_type;        /* DEVMM_DEVICE_* it allocates on */
  const char *const *options; /* its option keys, NULL-terminated (NULL: none) */
  const char *const *help;    /* one line per key, same order (NULL: none given) */
} devmm_kind_status;
/* Kind i (numbered as devmm_kind_name) with its description and options (strings live until
 * the next devmm_init/devmm_shutdown); DEVMM_EINVAL past the end. */
DEVMM_API int devmm_kind_get(size_t i, devmm_kind_status *out);
/* Creates a resource of a named kind ("cpu.mmap") for device_id with key/value options. */
DEVMM_API int devmm_resource_create_kind(const char *kind, int32_t device_id,
                                         const devmm_option *options, size_t noptions,
                                         devmm_resource **out);
/* Everything above as one JSON document; free with devmm_string_free. A configuration that
 * does not load (devmm_init was not called) fails with its error (file:line). */
DEVMM_API int devmm_info_json(char **out);
/* The same document as far as devmm knows now, initialising no device runtime: a plugin that
 * counts its devices at their first use (a GPU plugin, ADR 38) shows 0 devices and no error
 * until then (devmm_info_json counts them). */
DEVMM_API int devmm_info_json_now(char **out);

#ifdef __cplusplus
}
#endif
#endif
