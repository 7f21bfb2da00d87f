/* A test plugin written only with <devmm/plugin_helpers.h>: DEVMM_PLUGIN_DEFINE for the entry,
 * devmm_plugin_context in the ops, devmm_option_size/_bool/_get for the options (devmm_device_total
 * for percentages) and devmm_name_format for the resource's name. Kind helpers.heap on cpu:0,
 * options flag (a boolean, default 0), size (a size, default 4096), label (a string). Built as
 * devmm-helpers.so. */
#include <devmm/plugin_helpers.h>

#include <stdlib.h>

typedef struct {
  size_t size;
} heap;

static int heap_alloc(devmm_resource *self, size_t b, size_t a, devmm_stream s, void **out) {
  (void)s;
  heap *h = devmm_plugin_context(self);
  if (b > h->size)
    return devmm_plugin_host->set_error(DEVMM_ENOMEM, "%zu bytes is over the size %zu", b, h->size);
  return posix_memalign(out, a < sizeof(void *) ? sizeof(void *) : a, b) == 0
             ? DEVMM_OK
             : devmm_plugin_host->set_error(DEVMM_ENOMEM, "posix_memalign failed");
}
static int heap_free(devmm_resource *self, void *p, size_t b, size_t a, devmm_stream s) {
  (void)self, (void)b, (void)a, (void)s;
  free(p);
  return DEVMM_OK;
}
static void heap_destroy(devmm_resource *self) { free(devmm_plugin_context(self)); }
static const devmm_resource_ops heap_ops = {.struct_size = sizeof heap_ops,
                                            .allocate = heap_alloc,
                                            .deallocate = heap_free,
                                            .destroy = heap_destroy};

static int heap_create(const devmm_host_services *h, int32_t id, const devmm_option *o, size_t n,
                       devmm_resource **out) {
  (void)id;
  int flag = 0;
  size_t size = 4096;
  size_t total = devmm_device_total(h, (devmm_device){DEVMM_DEVICE_CPU, 0}); /* for "50%" */
  if (devmm_option_bool(h, o, n, "flag", &flag) || devmm_option_size(h, o, n, "size", total, &size))
    return DEVMM_EINVAL;
  const char *label = devmm_option_get(o, n, "label");
  heap *st = malloc(sizeof *st);
  if (!st)
    return h->set_error(DEVMM_ENOMEM, "out of memory");
  st->size = size;
  char name[48]; /* small on purpose: devmm_name_format truncates */
  devmm_name_format(name, sizeof name, "helpers.heap(flag=%d,size=%zu,label=%s)", flag, size,
                    label ? label : "-");
  int rc = h->resource_create(&heap_ops, st, (devmm_device){DEVMM_DEVICE_CPU, 0}, name,
                              DEVMM_RESOURCE_THREAD_SAFE | DEVMM_RESOURCE_HOST_ACCESSIBLE, out);
  if (rc)
    free(st);
  return rc;
}

static const char *const heap_options[] = {"flag", "size", "label", NULL};
static const devmm_resource_kind heap_kind = {.struct_size = sizeof(devmm_resource_kind),
                                              .name = "helpers.heap",
                                              .description = "posix_memalign, up to size bytes",
                                              .device_type = DEVMM_DEVICE_CPU,
                                              .options = heap_options,
                                              .create = heap_create};
static const devmm_resource_kind *const kinds[] = {&heap_kind};
static const devmm_plugin descriptor = {.abi_major = DEVMM_PLUGIN_ABI_MAJOR,
                                        .abi_minor = DEVMM_PLUGIN_ABI_MINOR,
                                        .struct_size = sizeof(devmm_plugin),
                                        .name = "helpers",
                                        .version = "0.0.1",
                                        .description = "written with plugin_helpers.h",
                                        .nkinds = 1,
                                        .kinds = kinds};

DEVMM_PLUGIN_DEFINE(descriptor)
