/* cpu.aligned: posix_memalign with a minimum alignment (option alignment, a power of two,
 * default 64); the resource's context is that minimum. */
#include "cpu_internal.h"

#include <stdio.h>
#include <string.h>

static int aligned_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream s,
                            void **out) {
  size_t min = (size_t)(uintptr_t)cpu_host->resource_context(self);
  if (s)
    return cpu_check_stream("cpu.aligned", s);
  return cpu_alloc_aligned("cpu.aligned", bytes, align > min ? align : min, out);
}

static const devmm_resource_ops aligned_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = aligned_allocate,
    .deallocate = cpu_free_deallocate,
    .mem_info = cpu_mem_info,
    .copy = cpu_copy,
    .memset = cpu_memset,
};

static int aligned_create(const devmm_host_services *h, int32_t id, const devmm_option *o, size_t n,
                          devmm_resource **out) {
  if (cpu_device_zero("cpu.aligned", id))
    return DEVMM_EINVAL;
  size_t align = 64;
  for (size_t i = 0; i < n; i++)
    if (strcmp(o[i].key, "alignment") == 0) {
      if (h->parse_size(o[i].value, 0, &align))
        return cpu_option_error(h, "cpu.aligned", "alignment");
      if (!align || (align & (align - 1)))
        return h->set_error(DEVMM_EINVAL, "cpu.aligned: alignment %zu is not a power of two",
                            align);
      if (align > DEVMM_MAX_ALIGNMENT) /* every allocation would fail (test_first_hour) */
        return h->set_error(DEVMM_EINVAL,
                            "cpu.aligned: alignment %zu is above devmm's largest, %zu (1 TiB, "
                            "DEVMM_MAX_ALIGNMENT): expected a power of two up to it",
                            align, DEVMM_MAX_ALIGNMENT);
    }
  char name[64];
  snprintf(name, sizeof name, "cpu.aligned(%zu)", align);
  return h->resource_create(&aligned_ops, (void *)(uintptr_t)align, CPU0, name, CPU_FLAGS, out);
}

static const char *const aligned_options[] = {"alignment", NULL};
static const char *const aligned_help[] = {"the minimum alignment, a power of two (default 64)",
                                           NULL};

const devmm_resource_kind cpu_aligned_kind = {
    .struct_size = sizeof(devmm_resource_kind),
    .name = "cpu.aligned",
    .description = "posix_memalign with a minimum alignment",
    .device_type = DEVMM_DEVICE_CPU,
    .options = aligned_options,
    .create = aligned_create,
    .option_help = aligned_help,
};
