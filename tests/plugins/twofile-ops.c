/* The ops half of a plugin of two source files that both include <devmm/plugin_helpers.h>
 * (suite plugins: plugin_helpers_two_files_and_cpp): devmm_plugin_context and devmm_plugin_host
 * here must see the host table that twofile-entry.c's DEVMM_PLUGIN_DEFINE stored. Built with
 * twofile-entry.c as devmm-twofile.so, kind twofile.heap on cpu:0. */
#include <devmm/plugin_helpers.h>

#include <stdlib.h>

#include "twofile.h"

static int heap_alloc(devmm_resource *self, size_t b, size_t a, devmm_stream s, void **out) {
  (void)s;
  size_t *limit = devmm_plugin_context(self);
  if (b > *limit)
    return devmm_plugin_host->set_error(DEVMM_ENOMEM, "%zu bytes is over %zu", b, *limit);
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
const devmm_resource_ops twofile_ops = {.struct_size = sizeof twofile_ops,
                                        .allocate = heap_alloc,
                                        .deallocate = heap_free,
                                        .destroy = heap_destroy};
