/* Devices as text: the names of DLPack device types ("cpu", "cuda:1", "deviceT:N") parsed and
 * formatted, and which devices the host can touch (include/devmm/resource.h). */
#include "resource_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
  int32_t type;
  const char *name;
} device_names[] = {
    {DEVMM_DEVICE_CPU, "cpu"},
    {DEVMM_DEVICE_CUDA, "cuda"},
    {DEVMM_DEVICE_CUDA_HOST, "cuda_host"},
    {DEVMM_DEVICE_ROCM, "rocm"},
    {DEVMM_DEVICE_ROCM_HOST, "rocm_host"},
    {DEVMM_DEVICE_CUDA_MANAGED, "cuda_managed"},
    {DEVMM_DEVICE_SIM, "sim"},
    {DEVMM_DEVICE_SIM_HOST, "sim_host"},
    {DEVMM_DEVICE_SIM_MANAGED, "sim_managed"},
};
#define NDEVNAMES (sizeof device_names / sizeof device_names[0])

int devmm_device_format(devmm_device d, char *buf, size_t cap) {
  if (!buf || !cap)
    return devmm_set_error(DEVMM_EINVAL, "devmm_device_format: empty buffer");
  for (size_t i = 0; i < NDEVNAMES; i++)
    if (device_names[i].type == d.device_type) {
      int n = d.device_type == DEVMM_DEVICE_CPU && d.device_id == 0
                  ? snprintf(buf, cap, "cpu")
                  : snprintf(buf, cap, "%s:%d", device_names[i].name, (int)d.device_id);
      return n >= 0 && (size_t)n < cap
                 ? DEVMM_OK
                 : devmm_set_error(DEVMM_EINVAL, "devmm_device_format: buffer too small");
    }
  snprintf(buf, cap, "device%d:%d", (int)d.device_type, (int)d.device_id);
  return DEVMM_OK;
}

int devmm_device_host_accessible(devmm_device d) {
  return d.device_type == DEVMM_DEVICE_CPU || d.device_type == DEVMM_DEVICE_CUDA_HOST ||
         d.device_type == DEVMM_DEVICE_ROCM_HOST || d.device_type == DEVMM_DEVICE_CUDA_MANAGED ||
         d.device_type == DEVMM_DEVICE_SIM_HOST || d.device_type == DEVMM_DEVICE_SIM_MANAGED;
}

devmm_device devmm_device_home(devmm_device d) {
  if (d.device_type == DEVMM_DEVICE_CUDA_MANAGED)
    d.device_type = DEVMM_DEVICE_CUDA;
  else if (d.device_type == DEVMM_DEVICE_SIM_MANAGED)
    d.device_type = DEVMM_DEVICE_SIM;
  return d;
}

/* The id after "name:" (none: 0), or -1 with the error set. */
static long parse_device_id(const char *text, const char *colon) {
  if (!colon)
    return 0;
  char *end;
  long id = strtol(colon + 1, &end, 10);
  if (end == colon + 1 || *end || id < 0 || id > 65535)
    return devmm_set_error(DEVMM_EINVAL,
                           "device '%.64s': the id after ':' must be an integer 0..65535", text),
           -1;
  return id;
}

int devmm_device_parse(const char *text, devmm_device *d) {
  if (!text || !d)
    return devmm_set_error(DEVMM_EINVAL, "devmm_device_parse: %s is NULL", !text ? "text" : "d");
  const char *colon = strchr(text, ':');
  size_t n = colon ? (size_t)(colon - text) : strlen(text);
  int32_t type = 0;
  for (size_t i = 0; i < NDEVNAMES; i++)
    if (strlen(device_names[i].name) == n && strncmp(text, device_names[i].name, n) == 0)
      type = device_names[i].type;
  /* "deviceT": a device type without a name, as devmm_device_format writes it (a plugin's own
   * DLPack code, e.g. device14 for oneAPI) */
  if (!type && n > 6 && strncmp(text, "device", 6) == 0 && text[6] >= '1' && text[6] <= '9') {
    char *end;
    long t = strtol(text + 6, &end, 10);
    if (end == text + n && t > 0 && t <= INT32_MAX)
      type = (int32_t)t;
  }
  if (!type)
    return devmm_set_error(DEVMM_EINVAL,
                           "unknown device '%.64s': expected cpu[:N], cuda[:N], cuda_host[:N], "
                           "cuda_managed[:N], rocm[:N], rocm_host[:N], sim[:N], sim_host[:N], "
                           "sim_managed[:N] or deviceT[:N] (a "
                           "plugin's own DLPack device type T, as devmm-info lists it)",
                           text);
  long id = parse_device_id(text, colon);
  if (id < 0)
    return DEVMM_EINVAL;
  d->device_type = type;
  d->device_id = (int32_t)id;
  return DEVMM_OK;
}
