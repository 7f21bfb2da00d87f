/* devmm — the plugin SDK: what a backend .so implements (ABI v1).
 *
 * A plugin exports one C symbol, DEVMM_PLUGIN_ENTRY_SYMBOL ("devmm_plugin_entry"), of type
 * devmm_plugin_entry_fn. The host calls it once with its ABI version and a table of services;
 * the plugin returns a static descriptor (or NULL after host->set_error on failure). The
 * descriptor lists the plugin's devices and its named resource kinds ("cpu.malloc"), each
 * with a factory that takes a device id and the key/value options of its devmm.ini section.
 *
 * Compatibility rules:
 *  - Every struct starts with (or carries) struct_size; fields are only ever appended.
 *  - The host refuses a descriptor whose abi_major differs from its own, and accepts any
 *    abi_minor <= its own (fields past a plugin's struct_size read as absent).
 *  - A plugin must check host->abi_major and may use host services up to host->struct_size.
 *  - Plugins report errors through host->set_error, never by printing; they link no devmm
 *    library: every service comes through the host table.
 *
 *   static const devmm_plugin desc = {DEVMM_PLUGIN_ABI_MAJOR, DEVMM_PLUGIN_ABI_MINOR,
 *                                     sizeof(devmm_plugin), "mine", "1.0", ...};
 *   DEVMM_PLUGIN_EXPORT const devmm_plugin *devmm_plugin_entry(uint32_t major, uint32_t minor,
 *                                                             const devmm_host_services *h);
 */
#ifndef DEVMM_PLUGIN_H
#define DEVMM_PLUGIN_H

#include "error.h"
#include "export.h"
#include "resource.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DEVMM_PLUGIN_ABI_MAJOR 1
#define DEVMM_PLUGIN_ABI_MINOR 0
#define DEVMM_PLUGIN_ENTRY_SYMBOL "devmm_plugin_entry"
#define DEVMM_PLUGIN_EXPORT __attribute__((visibility("default")))

/* Log levels for host->log. */
enum {
  DEVMM_LOG_ERROR = 0,
  DEVMM_LOG_WARN = 1,
  DEVMM_LOG_INFO = 2,
  DEVMM_LOG_DEBUG = 3,
};

/* One key = value line of a devmm.ini device section (line is its line number, 0 if none). */
typedef struct devmm_option {
  const char *key;
  const char *value;
  int line;
} devmm_option;

/* Services the host offers to plugins. Fields are only appended (check struct_size). */
typedef struct devmm_host_services {
  size_t struct_size;
  uint32_t abi_major, abi_minor;
  /* Logs a message at a DEVMM_LOG_* level, prefixed with the plugin's name. */
  void (*log)(int level, const char *plugin, const char *fmt, ...)
      __attribute__((format(printf, 3, 4)));
  /* Sets the calling thread's devmm error; returns status. */
  int (*set_error)(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
  /* Creates a resource (see devmm_resource_create). */
  int (*resource_create)(const devmm_resource_ops *ops, void *ctx, devmm_device device,
                         const char *name, unsigned flags, devmm_resource **out);
  /* The context pointer of a resource. */
  void *(*resource_context)(const devmm_resource *r);
  /* Parses a size ("4GiB", "512 MB", "1000", "90%" of total_bytes) into bytes. */
  int (*parse_size)(const char *text, size_t total_bytes, size_t *out);
  /* Parses a boolean (true/false, yes/no, on/off, 1/0). */
  int (*parse_bool)(const char *text, int *out);
  /* The calling thread's current devmm error message. */
  const char *(*last_error)(void);
} devmm_host_services;

/* A device as a plugin describes it. */
typedef struct devmm_device_info {
  size_t struct_size;
  devmm_device device;
  char name[128];
  size_t total_bytes, free_bytes; /* 0 if unknown */
} devmm_device_info;

/* A named resource kind and its factory. */
typedef struct devmm_resource_kind {
  size_t struct_size;
  const char *name;           /* "<plugin>.<kind>", e.g. "cpu.mmap" */
  const char *description;    /* one line */
  int32_t device_type;        /* DEVMM_DEVICE_* this kind allocates on */
  const char *const *options; /* the option keys it accepts, NULL-terminated (NULL: none) */
  /* Creates a resource for device_id with the section's options (only keys from `options`). */
  int (*create)(const devmm_host_services *host, int32_t device_id, const devmm_option *options,
                size_t noptions, devmm_resource **out);
} devmm_resource_kind;

/* What a plugin's entry returns. */
typedef struct devmm_plugin {
  uint32_t abi_major, abi_minor;
  size_t struct_size;
  const char *name; /* short name, as written in devmm.ini's plugins = ... */
  const char *version;
  const char *description;
  /* Number of devices; on failure returns an error (the reason) and *count = 0. */
  int (*device_count)(size_t *count);
  /* Describes device index (0 .. count-1). */
  int (*device_info)(size_t index, devmm_device_info *out);
  size_t nkinds;
  const devmm_resource_kind *kinds;
  /* Optional: called once at process exit (may be NULL). */
  void (*shutdown)(void);
  /* Optional: the keys of the plugin's own devmm.ini section, [plugin <name>]
   * (NULL-terminated; NULL: the plugin takes none). */
  const char *const *options;
  /* Optional: called at every load, after the entry and before device_count, with
   * that section's options (only keys from `options`; none when the section is absent). A bad
   * value returns DEVMM_EINVAL with a message: the load fails with it. */
  int (*configure)(const devmm_option *options, size_t noptions);
} devmm_plugin;

typedef const devmm_plugin *(*devmm_plugin_entry_fn)(uint32_t host_abi_major,
                                                     uint32_t host_abi_minor,
                                                     const devmm_host_services *host);

#ifdef __cplusplus
}
#endif
#endif
