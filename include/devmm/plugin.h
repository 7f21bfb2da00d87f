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
 *  - A versioned struct is never laid out in an array: an array's stride is the element size
 *    the plugin was compiled with, which struct_size cannot correct. Kinds are an array of
 *    pointers; devmm_option carries no struct_size and never grows (ADR 25).
 *  - The host refuses a descriptor whose abi_major differs from its own, and accepts any
 *    abi_minor <= its own (fields past a plugin's struct_size read as absent).
 *  - A plugin must check host->abi_major and may use host services up to host->struct_size.
 *  - Plugins report errors through host->set_error, never by printing; they link no devmm
 *    library: every service comes through the host table.
 *
 *   static const devmm_resource_kind heap = {.struct_size = sizeof heap, .name = "mine.heap",
 *                                            ..., .create = heap_create};
 *   static const devmm_resource_kind *const kinds[] = {&heap};
 *   static const devmm_plugin desc = {.abi_major = DEVMM_PLUGIN_ABI_MAJOR, ...,
 *                                     .nkinds = 1, .kinds = kinds};
 *   DEVMM_PLUGIN_EXPORT const devmm_plugin *devmm_plugin_entry(uint32_t major, uint32_t minor,
 *                                                             const devmm_host_services *h);
 *
 * <devmm/plugin_helpers.h> (optional, header-only) writes the entry and keeps the host table.
 * docs/plugins.md is the vendor's guide.
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
#define DEVMM_PLUGIN_ABI_MINOR 1 /* 1.1: devmm_resource_ops.prefetch */
#define DEVMM_PLUGIN_ENTRY_SYMBOL "devmm_plugin_entry"
#define DEVMM_PLUGIN_EXPORT __attribute__((visibility("default")))

/* Log levels for host->log. */
enum {
  DEVMM_LOG_ERROR = 0,
  DEVMM_LOG_WARN = 1,
  DEVMM_LOG_INFO = 2,
  DEVMM_LOG_DEBUG = 3,
};

/* One key = value line of a devmm.ini device section (line is its line number, 0 if none).
 * Handed to plugins as an array, so it carries no struct_size and never changes (ADR 25). */
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
  /* Appended (check struct_size): the total bytes of `device` as the plugin that owns it
   * enumerated it, for a factory's percentage sizes when the device is another plugin's (a
   * plugin that only adds kinds). DEVMM_ENOENT with a message when no loaded plugin enumerates
   * it or its total is unknown (0). Callable from factories, configure and ops. */
  int (*device_total)(devmm_device device, size_t *total_bytes);
} devmm_host_services;

/* A device as a plugin describes it. The host allocates it and sets struct_size; device_info
 * fills only the fields it knows (never past out->struct_size). */
typedef struct devmm_device_info {
  size_t struct_size;
  devmm_device device;
  char name[128];
  size_t total_bytes, free_bytes; /* 0 if unknown */
} devmm_device_info;

/* A named resource kind and its factory. The descriptor lists kinds by pointer, so a kind
 * compiled against an older (shorter) struct is read up to its own struct_size. */
typedef struct devmm_resource_kind {
  size_t struct_size;         /* sizeof(devmm_resource_kind) when compiled; at least up to create */
  const char *name;           /* "<plugin>.<kind>", e.g. "cpu.mmap" */
  const char *description;    /* one line */
  int32_t device_type;        /* DEVMM_DEVICE_* this kind allocates on */
  const char *const *options; /* the option keys it accepts, NULL-terminated (NULL: none) */
  /* Creates a resource for device_id with the section's options (only keys from `options`).
   * On failure: a negative status and host->set_error. Where the host reports the failure (a
   * device's error) it prefixes "<kind>: " unless the message already starts with the kind's
   * name (ADR 25). DEVMM_EINVAL means a bad option value. */
  int (*create)(const devmm_host_services *host, int32_t device_id, const devmm_option *options,
                size_t noptions, devmm_resource **out);
  /* Optional: one line of help per key of `options`, in the same order (NULL: none), shown by
   * devmm-info. */
  const char *const *option_help;
} devmm_resource_kind;

/* What a plugin's entry returns. */
typedef struct devmm_plugin {
  uint32_t abi_major, abi_minor;
  size_t struct_size;
  const char *name; /* short name, as written in devmm.ini's plugins = ... */
  const char *version;
  const char *description;
  /* Number of devices; on failure returns an error (the reason) and *count = 0. Optional, with
   * device_info: a plugin that only adds kinds for another plugin's device sets both NULL (0
   * devices). A device two plugins enumerate belongs to the first in plugins = ...; the other
   * gets a warning. */
  int (*device_count)(size_t *count);
  /* Describes device index (0 .. count-1). Required when device_count is set. */
  int (*device_info)(size_t index, devmm_device_info *out);
  size_t nkinds;
  const devmm_resource_kind *const *kinds; /* nkinds pointers (ADR 25) */
  /* Optional: called once, at process exit (an atexit handler of libdevmm, only if the plugin
   * was loaded; never at devmm_shutdown, since resources outlive it). Resources may still exist:
   * release process-wide state that the OS would not, and free nothing they use. A forked
   * child that calls exit runs it too. */
  void (*shutdown)(void);
  /* Optional: the keys of the plugin's own devmm.ini section, [plugin <name>]
   * (NULL-terminated; NULL: the plugin takes none). */
  const char *const *options;
  /* Optional: called at every load, after the entry and before device_count, with
   * that section's options (only keys from `options`; none when the section is absent). A bad
   * value returns DEVMM_EINVAL with a message: the load fails with it. */
  int (*configure)(const devmm_option *options, size_t noptions);
  /* Optional (read when struct_size covers it; 0: not set): the device type of every device the
   * plugin enumerates, set by a plugin whose device_count initialises a runtime (a GPU's). devmm
   * then never counts them at load or devmm_init: only at the first use of a device of that
   * type, or when asked about every device (devmm_plugin_get, devmm_device_count, devmm-info),
   * so that a process that uses only the CPU never initialises that runtime (ADR 38). */
  int32_t lazy_device_type;
} devmm_plugin;

typedef const devmm_plugin *(*devmm_plugin_entry_fn)(uint32_t host_abi_major,
                                                     uint32_t host_abi_minor,
                                                     const devmm_host_services *host);

#ifdef __cplusplus
}
#endif
#endif
