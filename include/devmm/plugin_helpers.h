/* devmm — optional helpers for plugin authors (ADR 25). Header-only: every helper is static
 * inline and devmm_plugin_host a weak hidden variable, so a plugin still links nothing. Any
 * number of the plugin's source files may include it (C or C++); one of them writes
 * DEVMM_PLUGIN_DEFINE.
 *
 *   #include <devmm/plugin_helpers.h>
 *   static const devmm_plugin descriptor = {...};
 *   DEVMM_PLUGIN_DEFINE(descriptor)
 *
 *   static int heap_create(const devmm_host_services *h, int32_t id, const devmm_option *o,
 *                          size_t n, devmm_resource **out) {
 *     size_t size = 1 << 20;
 *     if (devmm_option_size(h, o, n, "size", 0, &size)) return DEVMM_EINVAL;
 *     ...
 *   }
 *   ... devmm_plugin_context(self) in an op instead of a global host pointer ...
 */
#ifndef DEVMM_PLUGIN_HELPERS_H
#define DEVMM_PLUGIN_HELPERS_H

#include "plugin.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The host's services table, stored by DEVMM_PLUGIN_DEFINE's entry (NULL before it ran). One
 * variable for the whole plugin: every source file that includes this header defines it weak
 * and hidden, so the linker keeps one copy, shared by all the plugin's files and invisible
 * outside its .so (each plugin has its own). */
__attribute__((weak, visibility("hidden"))) const devmm_host_services *devmm_plugin_host = NULL;

/* The smallest host table the helpers accept: ABI 1.0's, up to last_error. */
#define DEVMM_PLUGIN_HOST_MIN_SIZE                                                                 \
  (offsetof(devmm_host_services, last_error) + sizeof(const char *(*)(void)))

#ifdef __cplusplus
#define DEVMM__ENTRY_LINKAGE extern "C"
#else
#define DEVMM__ENTRY_LINKAGE
#endif

/* Defines devmm_plugin_entry (extern "C" in C++): refuses a host of another ABI major or a
 * table smaller than ABI 1.0's (each with a message), stores the table in devmm_plugin_host
 * and returns &descriptor. Use it in one source file of the plugin. */
#define DEVMM_PLUGIN_DEFINE(descriptor)                                                            \
  DEVMM__ENTRY_LINKAGE DEVMM_PLUGIN_EXPORT const devmm_plugin *devmm_plugin_entry(                 \
      uint32_t major, uint32_t minor, const devmm_host_services *h) {                              \
    (void)minor;                                                                                   \
    if (!h)                                                                                        \
      return NULL;                                                                                 \
    if (h->struct_size < DEVMM_PLUGIN_HOST_MIN_SIZE) {                                             \
      if (h->struct_size >= offsetof(devmm_host_services, set_error) + sizeof h->set_error)        \
        h->set_error(DEVMM_EPLUGIN,                                                                \
                     "%s: the host's services table has %zu bytes; this plugin needs ABI 1.0's, "  \
                     "%zu",                                                                        \
                     (descriptor).name, h->struct_size, (size_t)DEVMM_PLUGIN_HOST_MIN_SIZE);       \
      return NULL;                                                                                 \
    }                                                                                              \
    if (major != DEVMM_PLUGIN_ABI_MAJOR) {                                                         \
      h->set_error(DEVMM_EPLUGIN, "%s: built for plugin ABI %d.x, the host speaks %u.x",           \
                   (descriptor).name, DEVMM_PLUGIN_ABI_MAJOR, (unsigned)major);                    \
      return NULL;                                                                                 \
    }                                                                                              \
    devmm_plugin_host = h;                                                                         \
    return &(descriptor);                                                                          \
  }

/* The context a resource was created with (host->resource_context), for ops. */
static inline void *devmm_plugin_context(const devmm_resource *self) {
  return devmm_plugin_host->resource_context(self);
}

/* The value of `key` among options (the last one if repeated), or NULL. */
static inline const char *devmm_option_get(const devmm_option *options, size_t n, const char *key) {
  const char *value = NULL;
  for (size_t i = 0; i < n; i++)
    if (strcmp(options[i].key, key) == 0)
      value = options[i].value;
  return value;
}

/* Parses option `key` as a size (host->parse_size, "%" of total_bytes) into *out; leaves *out
 * alone when the key is absent. DEVMM_EINVAL on a bad value, with "key: <the host's message>"
 * (which quotes the value). */
static inline int devmm_option_size(const devmm_host_services *h, const devmm_option *options,
                                    size_t n, const char *key, size_t total_bytes, size_t *out) {
  const char *v = devmm_option_get(options, n, key);
  if (!v)
    return DEVMM_OK;
  size_t parsed;
  if (h->parse_size(v, total_bytes, &parsed) != DEVMM_OK)
    return h->set_error(DEVMM_EINVAL, "%s: %s", key, h->last_error());
  *out = parsed;
  return DEVMM_OK;
}

/* The total bytes of `device` (host->device_total, when the host has it), or 0 if unknown: the
 * total_bytes to give devmm_option_size for percentages in a plugin that only adds kinds. */
static inline size_t devmm_device_total(const devmm_host_services *h, devmm_device device) {
  size_t total = 0;
  if (h->struct_size >= offsetof(devmm_host_services, device_total) + sizeof h->device_total &&
      h->device_total && h->device_total(device, &total) != DEVMM_OK)
    total = 0;
  return total;
}

/* Parses option `key` as a boolean (host->parse_bool) into *out; *out unchanged if absent. */
static inline int devmm_option_bool(const devmm_host_services *h, const devmm_option *options,
                                    size_t n, const char *key, int *out) {
  const char *v = devmm_option_get(options, n, key);
  if (!v)
    return DEVMM_OK;
  int parsed;
  if (h->parse_bool(v, &parsed) != DEVMM_OK)
    return h->set_error(DEVMM_EINVAL, "%s: %s", key, h->last_error());
  *out = parsed;
  return DEVMM_OK;
}

/* Formats a resource name ("example.arena(64MiB)") into buf, truncating; returns buf. */
static inline const char *devmm_name_format(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline const char *devmm_name_format(char *buf, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (cap)
    vsnprintf(buf, cap, fmt, ap);
  va_end(ap);
  return buf;
}

#ifdef __cplusplus
}
#endif
#endif
