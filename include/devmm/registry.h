/* devmm — the per-device registry of current resources.
 *
 *   devmm_resource *prev;
 *   devmm_set_current_resource((devmm_device){DEVMM_DEVICE_CPU, 0}, mine, &prev);
 *   ... devmm_set_current_resource(dev, prev, NULL); devmm_resource_release(prev);
 */
#ifndef DEVMM_REGISTRY_H
#define DEVMM_REGISTRY_H

#include "resource.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Returns a new reference to the device's current resource. With none set, devmm initialises
 * from its configuration (devmm_init(NULL)) once; DEVMM_ENOENT if the device still has none. */
DEVMM_API int devmm_get_current_resource(devmm_device device, devmm_resource **out);
/* Makes r (retained; NULL clears) the device's current resource. The previous one is returned
 * in *previous (a reference the caller now owns) or released when previous is NULL. */
DEVMM_API int devmm_set_current_resource(devmm_device device, devmm_resource *r,
                                         devmm_resource **previous);
/* Clears every device's current resource (releasing them). */
DEVMM_API void devmm_registry_clear(void);

#ifdef __cplusplus
}
#endif
#endif
