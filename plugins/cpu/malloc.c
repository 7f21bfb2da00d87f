/* cpu.malloc: libc malloc/free, posix_memalign for alignments above 16 bytes. Also the
 * allocation and free that cpu.aligned shares (cpu_internal.h). */
#include "cpu_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int cpu_alloc_aligned(const char *kind, size_t bytes, size_t align, void **out) {
  void *p = NULL;
  int rc = align <= 16 ? ((p = malloc(bytes)) ? 0 : ENOMEM)
                       : posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, bytes);
  if (rc) {
    *out = NULL;
    return cpu_host->set_error(DEVMM_ENOMEM, "out of memory: %s could not allocate %zu bytes: %s",
                               kind, bytes, strerror(rc));
  }
  *out = p;
  return DEVMM_OK;
}

static int malloc_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream s,
                           void **out) {
  (void)self;
  if (__builtin_expect(s != NULL, 0))
    return cpu_check_stream("cpu.malloc", s);
  if (__builtin_expect(align <= 16, 1)) {
    if ((*out = malloc(bytes)) != NULL)
      return DEVMM_OK;
  }
  return cpu_alloc_aligned("cpu.malloc", bytes, align, out);
}

int cpu_free_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                        devmm_stream s) {
  (void)self, (void)bytes, (void)align, (void)s;
  free(ptr);
  return DEVMM_OK;
}

static const devmm_resource_ops malloc_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = malloc_allocate,
    .deallocate = cpu_free_deallocate,
    .mem_info = cpu_mem_info,
    .copy = cpu_copy,
    .memset = cpu_memset,
};

static int malloc_create(const devmm_host_services *h, int32_t id, const devmm_option *o, size_t n,
                         devmm_resource **out) {
  (void)o, (void)n;
  if (cpu_device_zero("cpu.malloc", id))
    return DEVMM_EINVAL;
  return h->resource_create(&malloc_ops, NULL, CPU0, "cpu.malloc", CPU_FLAGS, out);
}

const devmm_resource_kind cpu_malloc_kind = {
    .struct_size = sizeof(devmm_resource_kind),
    .name = "cpu.malloc",
    .description = "libc malloc/free",
    .device_type = DEVMM_DEVICE_CPU,
    .create = malloc_create,
};
