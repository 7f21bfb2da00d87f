/* devmm-cpu: host memory from libc and the kernel, one file per kind.
 *   cpu.malloc  — malloc/free (posix_memalign for alignments above 16 bytes): malloc.c
 *   cpu.aligned — posix_memalign with a minimum alignment (option alignment, default 64):
 *                 aligned.c
 *   cpu.mmap    — anonymous mmap; options huge_pages = never|transparent|explicit,
 *                 populate = true|false: mmap.c
 *   cpu.shm     — a memfd per allocation mapped MAP_SHARED: memory other processes can open
 *                 (devmm_ipc_get_handle / devmm_ipc_open, ADR 30): shm.c
 * This file is the plugin's entry: the descriptor, the one CPU device, and the ops every kind
 * shares. Includes only the public plugin SDK; every devmm service comes through the host
 * table. */
#include "cpu_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>

const devmm_host_services *cpu_host;

/* ------------------------------------------------------------------ shared ops */

int cpu_mem_info(devmm_resource *self, size_t *free_bytes, size_t *total_bytes) {
  (void)self;
  struct sysinfo si;
  if (sysinfo(&si) != 0)
    return cpu_host->set_error(DEVMM_EIO, "cpu: sysinfo failed: %s", strerror(errno));
  *total_bytes = (size_t)si.totalram * si.mem_unit;
  *free_bytes = (size_t)(si.freeram + si.bufferram) * si.mem_unit;
  /* MemAvailable is the better figure when the kernel offers it */
  FILE *f = fopen("/proc/meminfo", "re");
  if (f) {
    char line[128];
    unsigned long long kb;
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
        *free_bytes = (size_t)kb * 1024;
    fclose(f);
  }
  return DEVMM_OK;
}

int cpu_copy(devmm_resource *self, void *dst, const void *src, size_t n, devmm_stream s) {
  (void)self, (void)s;
  memmove(dst, src, n);
  return DEVMM_OK;
}

int cpu_memset(devmm_resource *self, void *dst, int v, size_t n, devmm_stream s) {
  (void)self, (void)s;
  memset(dst, v, n);
  return DEVMM_OK;
}

int cpu_check_stream(const char *kind, devmm_stream s) {
  return s ? cpu_host->set_error(DEVMM_EINVAL, "%s: CPU memory has no streams (got stream %p)",
                                 kind, s)
           : DEVMM_OK;
}

int cpu_device_zero(const char *kind, int32_t id) {
  return id == 0
             ? DEVMM_OK
             : cpu_host->set_error(DEVMM_EINVAL, "%s: there is one CPU device, cpu:0 (got id %d)",
                                   kind, (int)id);
}

int cpu_option_error(const devmm_host_services *h, const char *kind, const char *option) {
  char why[512]; /* the parser's message, copied: set_error writes the buffer it lives in */
  snprintf(why, sizeof why, "%s", h->last_error());
  return h->set_error(DEVMM_EINVAL, "%s: %s: %s", kind, option, why);
}

/* ------------------------------------------------------------------ the descriptor */

static int device_count(size_t *count) {
  *count = 1;
  return DEVMM_OK;
}

static int device_info(size_t index, devmm_device_info *out) {
  if (index != 0)
    return cpu_host->set_error(DEVMM_EINVAL, "cpu: no device #%zu", index);
  out->device = CPU0;
  snprintf(out->name, sizeof out->name, "CPU");
  FILE *f = fopen("/proc/cpuinfo", "re");
  if (f) {
    char line[256];
    while (fgets(line, sizeof line, f))
      if (strncmp(line, "model name", 10) == 0) {
        char *v = strchr(line, ':');
        if (v) {
          v += 1 + strspn(v + 1, " \t");
          v[strcspn(v, "\n")] = '\0';
          snprintf(out->name, sizeof out->name, "%s (%ld cores)", v, sysconf(_SC_NPROCESSORS_ONLN));
        }
        break;
      }
    fclose(f);
  }
  return cpu_mem_info(NULL, &out->free_bytes, &out->total_bytes);
}

static const devmm_resource_kind *const kinds[] = {&cpu_malloc_kind, &cpu_aligned_kind,
                                                   &cpu_mmap_kind, &cpu_shm_kind};

static const devmm_plugin descriptor = {
    DEVMM_PLUGIN_ABI_MAJOR,
    DEVMM_PLUGIN_ABI_MINOR,
    sizeof(devmm_plugin),
    "cpu",
    "1.0.0",
    "host memory: libc malloc, posix_memalign, anonymous mmap, shared memfd",
    device_count,
    device_info,
    sizeof kinds / sizeof kinds[0],
    kinds,
    NULL,
};

DEVMM_PLUGIN_EXPORT const devmm_plugin *devmm_plugin_entry(uint32_t major, uint32_t minor,
                                                           const devmm_host_services *h) {
  (void)minor;
  if (major != DEVMM_PLUGIN_ABI_MAJOR || !h || h->struct_size < sizeof(devmm_host_services)) {
    if (h && h->set_error)
      h->set_error(DEVMM_EPLUGIN, "cpu: needs host ABI %d.%d", DEVMM_PLUGIN_ABI_MAJOR,
                   DEVMM_PLUGIN_ABI_MINOR);
    return NULL;
  }
  cpu_host = h;
  return &descriptor;
}
