/* The host services table handed to plugins (include/devmm/plugin.h): devmm's diagnostics,
 * errors, resource creation, size and boolean parsing, and a device's total memory, which the
 * configuration answers through the hook it installs (config/init.c). */
#include "plugin_host_internal.h"

#include <stdarg.h>
#include <stdio.h>

static devmm__device_total_fn device_total_hook;

void devmm__set_device_total_hook(devmm__device_total_fn fn) { device_total_hook = fn; }

static int host_device_total(devmm_device device, size_t *total_bytes) {
  if (!device_total_hook)
    return devmm_set_error(DEVMM_ENOTSUP, "device_total: no configuration is loaded");
  return device_total_hook(device, total_bytes);
}

static void host_log(int level, const char *plugin, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  devmm__vdiag(level, plugin, fmt, ap);
  va_end(ap);
}

static int host_parse_bool(const char *text, int *out) { return devmm__parse_bool(text, out); }

static const devmm_host_services host = {
    .struct_size = sizeof(devmm_host_services),
    .abi_major = DEVMM_PLUGIN_ABI_MAJOR,
    .abi_minor = DEVMM_PLUGIN_ABI_MINOR,
    .log = host_log,
    .set_error = devmm_set_error,
    .resource_create = devmm_resource_create,
    .resource_context = devmm_resource_context,
    .parse_size = devmm_parse_size,
    .parse_bool = host_parse_bool,
    .last_error = devmm_last_error,
    .device_total = host_device_total,
};

const devmm_host_services *devmm__host(void) { return &host; }

const char *devmm__factory_silent(int status, char *buf, size_t cap) {
  snprintf(buf, cap, "the factory failed with %s (%s) and set no message",
           devmm_status_name(status), devmm_strerror(status));
  return buf;
}
