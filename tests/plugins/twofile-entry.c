/* The entry half of devmm-twofile.so (see twofile-ops.c): the descriptor, the factory and
 * DEVMM_PLUGIN_DEFINE. */
#include <devmm/plugin_helpers.h>

#include <stdlib.h>

#include "twofile.h"

static int heap_create(const devmm_host_services *h, int32_t id, const devmm_option *o, size_t n,
                       devmm_resource **out) {
  (void)id;
  size_t *limit = malloc(sizeof *limit);
  if (!limit)
    return h->set_error(DEVMM_ENOMEM, "out of memory");
  *limit = 4096;
  if (devmm_option_size(h, o, n, "size", 0, limit)) {
    free(limit);
    return DEVMM_EINVAL;
  }
  int rc = h->resource_create(&twofile_ops, limit, (devmm_device){DEVMM_DEVICE_CPU, 0},
                              "twofile.heap", DEVMM_RESOURCE_THREAD_SAFE, out);
  if (rc)
    free(limit);
  return rc;
}

static const char *const heap_options[] = {"size", NULL};
static const devmm_resource_kind heap_kind = {.struct_size = sizeof(devmm_resource_kind),
                                              .name = "twofile.heap",
                                              .description = "two files, one host table",
                                              .device_type = DEVMM_DEVICE_CPU,
                                              .options = heap_options,
                                              .create = heap_create};
static const devmm_resource_kind *const kinds[] = {&heap_kind};
static const devmm_plugin descriptor = {.abi_major = DEVMM_PLUGIN_ABI_MAJOR,
                                        .abi_minor = DEVMM_PLUGIN_ABI_MINOR,
                                        .struct_size = sizeof(devmm_plugin),
                                        .name = "twofile",
                                        .version = "0.0.1",
                                        .description = "two source files with plugin_helpers.h",
                                        .nkinds = 1,
                                        .kinds = kinds};

DEVMM_PLUGIN_DEFINE(descriptor)
