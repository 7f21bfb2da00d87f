/* Library initialisation: the registry's fallback when no resource is set for a device. */
#include "internal.h"

int devmm__registry_fallback(devmm_device device, devmm_resource **out) {
  char name[32];
  devmm_device_format(device, name, sizeof name);
  *out = NULL;
  return devmm_set_error(DEVMM_ENOENT,
                         "no current resource for device %s: set one with "
                         "devmm_set_current_resource()",
                         name);
}
