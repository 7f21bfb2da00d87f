/* cpu.mmap: anonymous mmap; options huge_pages = never|transparent|explicit (madvise, or
 * MAP_HUGETLB with 2 MiB pages) and populate = true|false (MAP_POPULATE). Alignments above the
 * page size over-map, then trim. */
#include "cpu_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

enum { HUGE_NEVER, HUGE_TRANSPARENT, HUGE_EXPLICIT };

typedef struct {
  int huge, populate;
  size_t page;
} mmap_cfg;

static int mmap_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream s,
                         void **out) {
  mmap_cfg *c = cpu_host->resource_context(self);
  *out = NULL;
  if (s)
    return cpu_check_stream("cpu.mmap", s);
  size_t len = cpu_round_up(bytes, c->page);
  size_t extra = align > c->page ? align : 0; /* over-map, then trim to the alignment */
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | (c->populate ? MAP_POPULATE : 0) |
              (c->huge == HUGE_EXPLICIT ? MAP_HUGETLB : 0);
  char *p = mmap(NULL, len + extra, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED)
    return cpu_host->set_error(
        DEVMM_ENOMEM, "out of memory: cpu.mmap could not map %zu bytes: %s%s", len + extra,
        strerror(errno),
        c->huge == HUGE_EXPLICIT ? " (explicit huge pages: are any reserved in "
                                   "/proc/sys/vm/nr_hugepages?)"
                                 : "");
  if (extra) {
    char *a = (char *)cpu_round_up((uintptr_t)p, align);
    if (a > p)
      munmap(p, (size_t)(a - p));
    size_t tail = (size_t)(p + len + extra - (a + len));
    if (tail)
      munmap(a + len, tail);
    p = a;
  }
  if (c->huge == HUGE_TRANSPARENT)
    madvise(p, len, MADV_HUGEPAGE);
  else if (c->huge == HUGE_NEVER)
    madvise(p, len, MADV_NOHUGEPAGE);
  *out = p;
  return DEVMM_OK;
}

static int mmap_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                           devmm_stream s) {
  (void)align, (void)s;
  mmap_cfg *c = cpu_host->resource_context(self);
  if (munmap(ptr, cpu_round_up(bytes, c->page)) != 0)
    return cpu_host->set_error(DEVMM_EINVAL, "cpu.mmap: munmap(%p, %zu) failed: %s", ptr, bytes,
                               strerror(errno));
  return DEVMM_OK;
}

static void mmap_destroy(devmm_resource *self) { free(cpu_host->resource_context(self)); }

static const devmm_resource_ops mmap_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = mmap_allocate,
    .deallocate = mmap_deallocate,
    .mem_info = cpu_mem_info,
    .copy = cpu_copy,
    .memset = cpu_memset,
    .destroy = mmap_destroy,
};

static int mmap_create(const devmm_host_services *h, int32_t id, const devmm_option *o, size_t n,
                       devmm_resource **out) {
  if (cpu_device_zero("cpu.mmap", id))
    return DEVMM_EINVAL;
  mmap_cfg c = {HUGE_NEVER, 0, (size_t)sysconf(_SC_PAGESIZE)};
  for (size_t i = 0; i < n; i++) {
    if (strcmp(o[i].key, "huge_pages") == 0) {
      if (strcasecmp(o[i].value, "never") == 0)
        c.huge = HUGE_NEVER;
      else if (strcasecmp(o[i].value, "transparent") == 0)
        c.huge = HUGE_TRANSPARENT;
      else if (strcasecmp(o[i].value, "explicit") == 0)
        c.huge = HUGE_EXPLICIT;
      else
        return h->set_error(DEVMM_EINVAL,
                            "cpu.mmap: huge_pages = %s: expected never, transparent or explicit",
                            o[i].value);
    } else if (strcmp(o[i].key, "populate") == 0) {
      if (h->parse_bool(o[i].value, &c.populate))
        return cpu_option_error(h, "cpu.mmap", "populate");
    }
  }
  if (c.huge == HUGE_EXPLICIT)
    c.page = 2u << 20; /* the default huge page size on x86-64 and arm64 */
  mmap_cfg *ctx = malloc(sizeof *ctx);
  if (!ctx)
    return h->set_error(DEVMM_ENOMEM, "cpu.mmap: out of host memory");
  *ctx = c;
  static const char *names[] = {"cpu.mmap", "cpu.mmap(transparent)", "cpu.mmap(explicit)"};
  int rc = h->resource_create(&mmap_ops, ctx, CPU0, names[c.huge], CPU_FLAGS, out);
  if (rc)
    free(ctx);
  return rc;
}

static const char *const mmap_options[] = {"huge_pages", "populate", NULL};
static const char *const mmap_help[] = {"never (default), transparent or explicit",
                                        "fault every page in at allocation (boolean)", NULL};

const devmm_resource_kind cpu_mmap_kind = {
    .struct_size = sizeof(devmm_resource_kind),
    .name = "cpu.mmap",
    .description = "anonymous mmap (huge pages, populate)",
    .device_type = DEVMM_DEVICE_CPU,
    .options = mmap_options,
    .create = mmap_create,
    .option_help = mmap_help,
};
