/* devmm-cpu: host memory from libc and the kernel.
 *   cpu.malloc  — malloc/free (posix_memalign for alignments above 16 bytes)
 *   cpu.aligned — posix_memalign with a minimum alignment (option alignment, default 64)
 *   cpu.mmap    — anonymous mmap; options huge_pages = never|transparent|explicit,
 *                 populate = true|false
 *   cpu.shm     — a memfd per allocation mapped MAP_SHARED: memory other processes can open
 *                 (devmm_ipc_get_handle / devmm_ipc_open, ADR 30)
 * Includes only the public plugin SDK; every devmm service comes through the host table. */
#include <devmm/ipc.h>
#include <devmm/plugin.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "../ipc_fd.h"

static const devmm_host_services *host;
static const devmm_device CPU0 = {DEVMM_DEVICE_CPU, 0};

/* ------------------------------------------------------------------ shared ops */

static int cpu_mem_info(devmm_resource *self, size_t *free_bytes, size_t *total_bytes) {
  (void)self;
  struct sysinfo si;
  if (sysinfo(&si) != 0)
    return host->set_error(DEVMM_EIO, "cpu: sysinfo failed: %s", strerror(errno));
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

static int cpu_copy(devmm_resource *self, void *dst, const void *src, size_t n, devmm_stream s) {
  (void)self, (void)s;
  memmove(dst, src, n);
  return DEVMM_OK;
}

static int cpu_memset(devmm_resource *self, void *dst, int v, size_t n, devmm_stream s) {
  (void)self, (void)s;
  memset(dst, v, n);
  return DEVMM_OK;
}

static int check_stream(const char *kind, devmm_stream s) {
  return s ? host->set_error(DEVMM_EINVAL, "%s: CPU memory has no streams (got stream %p)", kind, s)
           : DEVMM_OK;
}

/* ------------------------------------------------------------------ cpu.malloc / cpu.aligned */

static int aligned_alloc_bytes(const char *kind, size_t bytes, size_t align, void **out) {
  void *p = NULL;
  int rc = align <= 16 ? ((p = malloc(bytes)) ? 0 : ENOMEM)
                       : posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, bytes);
  if (rc) {
    *out = NULL;
    return host->set_error(DEVMM_ENOMEM, "out of memory: %s could not allocate %zu bytes: %s", kind,
                           bytes, strerror(rc));
  }
  *out = p;
  return DEVMM_OK;
}

static int malloc_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream s,
                           void **out) {
  (void)self;
  if (__builtin_expect(s != NULL, 0))
    return check_stream("cpu.malloc", s);
  if (__builtin_expect(align <= 16, 1)) {
    if ((*out = malloc(bytes)) != NULL)
      return DEVMM_OK;
  }
  return aligned_alloc_bytes("cpu.malloc", bytes, align, out);
}

static int free_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                           devmm_stream s) {
  (void)self, (void)bytes, (void)align, (void)s;
  free(ptr);
  return DEVMM_OK;
}

static const devmm_resource_ops malloc_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = malloc_allocate,
    .deallocate = free_deallocate,
    .mem_info = cpu_mem_info,
    .copy = cpu_copy,
    .memset = cpu_memset,
};

static const unsigned CPU_FLAGS = DEVMM_RESOURCE_THREAD_SAFE | DEVMM_RESOURCE_HOST_ACCESSIBLE;

static int device_zero(const char *kind, int32_t id) {
  return id == 0 ? DEVMM_OK
                 : host->set_error(DEVMM_EINVAL, "%s: there is one CPU device, cpu:0 (got id %d)",
                                   kind, (int)id);
}

static int malloc_create(const devmm_host_services *h, int32_t id, const devmm_option *o, size_t n,
                         devmm_resource **out) {
  (void)o, (void)n;
  if (device_zero("cpu.malloc", id))
    return DEVMM_EINVAL;
  return h->resource_create(&malloc_ops, NULL, CPU0, "cpu.malloc", CPU_FLAGS, out);
}

static int aligned_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream s,
                            void **out) {
  size_t min = (size_t)(uintptr_t)host->resource_context(self);
  if (s)
    return check_stream("cpu.aligned", s);
  return aligned_alloc_bytes("cpu.aligned", bytes, align > min ? align : min, out);
}

static const devmm_resource_ops aligned_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = aligned_allocate,
    .deallocate = free_deallocate,
    .mem_info = cpu_mem_info,
    .copy = cpu_copy,
    .memset = cpu_memset,
};

static int aligned_create(const devmm_host_services *h, int32_t id, const devmm_option *o, size_t n,
                          devmm_resource **out) {
  if (device_zero("cpu.aligned", id))
    return DEVMM_EINVAL;
  size_t align = 64;
  for (size_t i = 0; i < n; i++)
    if (strcmp(o[i].key, "alignment") == 0) {
      if (h->parse_size(o[i].value, 0, &align))
        return DEVMM_EINVAL;
      if (!align || (align & (align - 1)))
        return h->set_error(DEVMM_EINVAL, "cpu.aligned: alignment %zu is not a power of two",
                            align);
    }
  char name[64];
  snprintf(name, sizeof name, "cpu.aligned(%zu)", align);
  return h->resource_create(&aligned_ops, (void *)(uintptr_t)align, CPU0, name, CPU_FLAGS, out);
}

/* ------------------------------------------------------------------ cpu.mmap */

enum { HUGE_NEVER, HUGE_TRANSPARENT, HUGE_EXPLICIT };

typedef struct {
  int huge, populate;
  size_t page;
} mmap_cfg;

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static int mmap_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream s,
                         void **out) {
  mmap_cfg *c = host->resource_context(self);
  *out = NULL;
  if (s)
    return check_stream("cpu.mmap", s);
  size_t len = round_up(bytes, c->page);
  size_t extra = align > c->page ? align : 0; /* over-map, then trim to the alignment */
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | (c->populate ? MAP_POPULATE : 0) |
              (c->huge == HUGE_EXPLICIT ? MAP_HUGETLB : 0);
  char *p = mmap(NULL, len + extra, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED)
    return host->set_error(DEVMM_ENOMEM, "out of memory: cpu.mmap could not map %zu bytes: %s%s",
                           len + extra, strerror(errno),
                           c->huge == HUGE_EXPLICIT ? " (explicit huge pages: are any reserved in "
                                                      "/proc/sys/vm/nr_hugepages?)"
                                                    : "");
  if (extra) {
    char *a = (char *)round_up((uintptr_t)p, align);
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
  mmap_cfg *c = host->resource_context(self);
  if (munmap(ptr, round_up(bytes, c->page)) != 0)
    return host->set_error(DEVMM_EINVAL, "cpu.mmap: munmap(%p, %zu) failed: %s", ptr, bytes,
                           strerror(errno));
  return DEVMM_OK;
}

static void mmap_destroy(devmm_resource *self) { free(host->resource_context(self)); }

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
  if (device_zero("cpu.mmap", id))
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
        return DEVMM_EINVAL;
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

/* ------------------------------------------------------------------ cpu.shm
 * Each allocation is a memfd of its own, mapped MAP_SHARED; the descriptor stays open while the
 * allocation lives, so that another process can reopen it through /proc/<pid>/fd/<n> (ADR 30:
 * no name in /dev/shm that a crash would leave behind; the kernel drops the memory when the last
 * descriptor and mapping go). The live allocations are a small table under a mutex: a handle may
 * name a range inside one. The mappings opened from handles are in it too, each with its own
 * descriptor: a mapping exports again, as a handle naming this process (outside review,
 * finding 2), and outlives the exporter's free. Each memfd is sealed against shrinking. */

typedef struct {
  char *base;
  size_t len;
  int fd;
  int imported;      /* a mapping opened from a handle (closed by its close, never deallocated) */
  uint64_t file_off; /* the file offset base maps */
} shm_block;

static pthread_mutex_t shm_lock = PTHREAD_MUTEX_INITIALIZER;
static shm_block *shm_blocks;
static size_t shm_count, shm_cap;

static int shm_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream s,
                        void **out) {
  (void)self;
  *out = NULL;
  if (s)
    return check_stream("cpu.shm", s);
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t len = round_up(bytes, page), extra = align > page ? align : 0;
  int fd = memfd_create(IPCFD_NAME_CPU, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return host->set_error(errno == EMFILE || errno == ENFILE ? DEVMM_ENOMEM : DEVMM_EIO,
                           "%scpu.shm: memfd_create failed: %s%s",
                           errno == EMFILE || errno == ENFILE ? "out of memory: " : "",
                           strerror(errno),
                           errno == EMFILE ? " (each live cpu.shm allocation holds a descriptor: "
                                             "raise ulimit -n)"
                                           : "");
  char *p = MAP_FAILED;
  if (ftruncate(fd, (off_t)len) == 0 && ipcfd_seal(fd) == 0) {
    /* reserve len + extra, then put the file at an aligned address inside */
    char *area =
        extra ? mmap(NULL, len + extra, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) : NULL;
    if (area != MAP_FAILED) {
      char *at = extra ? (char *)round_up((uintptr_t)area, align) : NULL;
      p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED | (extra ? MAP_FIXED : 0), fd, 0);
      if (extra) {
        if (p == MAP_FAILED) {
          munmap(area, len + extra);
        } else {
          if (at > area)
            munmap(area, (size_t)(at - area));
          if (area + len + extra > at + len)
            munmap(at + len, (size_t)(area + len + extra - (at + len)));
        }
      }
    }
  }
  pthread_mutex_lock(&shm_lock);
  if (p != MAP_FAILED && shm_count == shm_cap) {
    size_t cap = shm_cap ? shm_cap * 2 : 16;
    shm_block *g = realloc(shm_blocks, cap * sizeof *g);
    if (g) {
      shm_blocks = g;
      shm_cap = cap;
    }
  }
  int ok = p != MAP_FAILED && shm_count < shm_cap;
  if (ok)
    shm_blocks[shm_count++] = (shm_block){p, len, fd, 0, 0};
  pthread_mutex_unlock(&shm_lock);
  if (!ok) {
    int e = errno;
    if (p != MAP_FAILED)
      munmap(p, len);
    close(fd);
    return host->set_error(DEVMM_ENOMEM, "out of memory: cpu.shm could not map %zu bytes: %s", len,
                           strerror(e));
  }
  *out = p;
  return DEVMM_OK;
}

static int shm_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                          devmm_stream s) {
  (void)self, (void)bytes, (void)align, (void)s;
  pthread_mutex_lock(&shm_lock);
  shm_block b = {NULL, 0, -1, 0, 0};
  for (size_t i = 0; i < shm_count; i++)
    if (shm_blocks[i].base == ptr && !shm_blocks[i].imported) {
      b = shm_blocks[i];
      shm_blocks[i] = shm_blocks[--shm_count];
      break;
    }
  pthread_mutex_unlock(&shm_lock);
  if (!b.base)
    return host->set_error(DEVMM_EINVAL, "cpu.shm: %p is not a live cpu.shm allocation", ptr);
  munmap(b.base, b.len); /* an importer's mapping keeps the memory until it closes */
  close(b.fd);
  return DEVMM_OK;
}

static int shm_get_handle(devmm_resource *self, void *ptr, size_t bytes, unsigned char *payload) {
  (void)self;
  const char *p = ptr;
  int err = EINVAL;
  ipcfd_ref ref;
  pthread_mutex_lock(&shm_lock);
  for (size_t i = 0; i < shm_count; i++) {
    shm_block *b = &shm_blocks[i];
    if (p >= b->base && p < b->base + b->len) {
      err = bytes <= (size_t)(b->base + b->len - p)
                ? ipcfd_describe(b->fd, b->file_off + (uint64_t)(p - b->base), &ref)
                : ERANGE;
      break;
    }
  }
  pthread_mutex_unlock(&shm_lock);
  if (err == ERANGE)
    return host->set_error(DEVMM_EINVAL, "cpu.shm: [%p, +%zu) runs past its allocation", ptr,
                           bytes);
  if (err)
    return host->set_error(DEVMM_EINVAL, "cpu.shm: %p is not inside a live cpu.shm allocation%s%s",
                           ptr, err == EINVAL ? "" : ": ", err == EINVAL ? "" : strerror(err));
  memcpy(payload, &ref, sizeof ref);
  return DEVMM_OK;
}

/* Maps bytes at ref->offset of fd (owned: kept with the mapping, closed on failure). */
static int shm_map(const ipcfd_ref *ref, size_t bytes, int fd, void **out, void **token);

static int shm_open_handle(devmm_resource *self, const unsigned char *payload, size_t bytes,
                           int32_t pid, void **out, void **token) {
  (void)self;
  ipcfd_ref ref;
  memcpy(&ref, payload, sizeof ref);
  char why[256];
  int status;
  int fd = ipcfd_open(&ref, pid, bytes, &status, why, sizeof why);
  if (fd < 0)
    return host->set_error(status, "cpu.shm: cannot open the IPC handle: %s", why);
  return shm_map(&ref, bytes, fd, out, token);
}

static int shm_open_fd(devmm_resource *self, const unsigned char *payload, size_t bytes, int given,
                       void **out, void **token) {
  (void)self;
  ipcfd_ref ref;
  memcpy(&ref, payload, sizeof ref);
  char why[256];
  int status;
  int fd = ipcfd_adopt(&ref, given, bytes, &status, why, sizeof why);
  if (fd < 0)
    return host->set_error(status, "cpu.shm: cannot open the IPC handle: %s", why);
  return shm_map(&ref, bytes, fd, out, token);
}

static int shm_handle_fd(devmm_resource *self, const unsigned char *payload, int *fd) {
  (void)self;
  ipcfd_ref ref;
  memcpy(&ref, payload, sizeof ref);
  int found = 0;
  pthread_mutex_lock(&shm_lock);
  for (size_t i = 0; i < shm_count && !found; i++) {
    struct stat st;
    found = shm_blocks[i].fd == ref.fd && fstat(ref.fd, &st) == 0 &&
            (uint64_t)st.st_ino == ref.ino && (uint64_t)st.st_dev == ref.dev;
  }
  pthread_mutex_unlock(&shm_lock);
  if (!found)
    return host->set_error(DEVMM_EINVAL,
                           "cpu.shm: the handle's descriptor %d is no live cpu.shm allocation or "
                           "mapping of this process (freed?)",
                           (int)ref.fd);
  *fd = ref.fd;
  return DEVMM_OK;
}

static int shm_map(const ipcfd_ref *r, size_t bytes, int fd, void **out, void **token) {
  ipcfd_ref ref = *r;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uint64_t start = ref.offset / page * page;
  size_t len = (size_t)(ref.offset - start) + bytes;
  char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)start);
  int e = errno;
  int ok = 0;
  if (m != MAP_FAILED) { /* kept, with its descriptor: the mapping can export again */
    pthread_mutex_lock(&shm_lock);
    if (shm_count == shm_cap) {
      size_t cap = shm_cap ? shm_cap * 2 : 16;
      shm_block *g = realloc(shm_blocks, cap * sizeof *g);
      if (g) {
        shm_blocks = g;
        shm_cap = cap;
      }
    }
    if ((ok = shm_count < shm_cap) != 0)
      shm_blocks[shm_count++] = (shm_block){m, len, fd, 1, start};
    pthread_mutex_unlock(&shm_lock);
    if (!ok) {
      munmap(m, len);
      e = ENOMEM;
    }
  }
  if (!ok) {
    close(fd);
    return host->set_error(DEVMM_ENOMEM,
                           "out of memory: cpu.shm could not map %zu bytes of an "
                           "IPC handle: %s",
                           len, strerror(e));
  }
  *token = m;
  *out = m + (ref.offset - start);
  return DEVMM_OK;
}

static int shm_close_handle(devmm_resource *self, void *ptr, size_t bytes, void *token) {
  (void)self;
  size_t len = (size_t)((char *)ptr + bytes - (char *)token);
  int fd = -1;
  pthread_mutex_lock(&shm_lock);
  for (size_t i = 0; i < shm_count; i++)
    if (shm_blocks[i].base == token && shm_blocks[i].imported) {
      fd = shm_blocks[i].fd;
      shm_blocks[i] = shm_blocks[--shm_count];
      break;
    }
  pthread_mutex_unlock(&shm_lock);
  if (fd >= 0)
    close(fd);
  if (munmap(token, len) != 0)
    return host->set_error(DEVMM_EINVAL, "cpu.shm: unmapping an IPC mapping at %p failed: %s", ptr,
                           strerror(errno));
  return DEVMM_OK;
}

static const devmm_resource_ipc_ops shm_ipc = {
    .struct_size = sizeof(devmm_resource_ipc_ops),
    .kind = "cpu.shm",
    .get_handle = shm_get_handle,
    .open = shm_open_handle,
    .close = shm_close_handle,
    .handle_fd = shm_handle_fd,
    .open_fd = shm_open_fd,
};

static const devmm_resource_ops shm_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = shm_allocate,
    .deallocate = shm_deallocate,
    .mem_info = cpu_mem_info,
    .copy = cpu_copy,
    .memset = cpu_memset,
    .ipc = &shm_ipc,
};

static int shm_create(const devmm_host_services *h, int32_t id, const devmm_option *o, size_t n,
                      devmm_resource **out) {
  (void)o, (void)n;
  if (device_zero("cpu.shm", id))
    return DEVMM_EINVAL;
  return h->resource_create(&shm_ops, NULL, CPU0, "cpu.shm", CPU_FLAGS, out);
}

/* ------------------------------------------------------------------ the descriptor */

static int device_count(size_t *count) {
  *count = 1;
  return DEVMM_OK;
}

static int device_info(size_t index, devmm_device_info *out) {
  if (index != 0)
    return host->set_error(DEVMM_EINVAL, "cpu: no device #%zu", index);
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

static const char *const aligned_options[] = {"alignment", NULL};
static const char *const mmap_options[] = {"huge_pages", "populate", NULL};

static const char *const aligned_help[] = {"the minimum alignment, a power of two (default 64)",
                                           NULL};
static const char *const mmap_help[] = {"never (default), transparent or explicit",
                                        "fault every page in at allocation (boolean)", NULL};

static const devmm_resource_kind malloc_kind = {
    .struct_size = sizeof(devmm_resource_kind),
    .name = "cpu.malloc",
    .description = "libc malloc/free",
    .device_type = DEVMM_DEVICE_CPU,
    .create = malloc_create,
};
static const devmm_resource_kind aligned_kind = {
    .struct_size = sizeof(devmm_resource_kind),
    .name = "cpu.aligned",
    .description = "posix_memalign with a minimum alignment",
    .device_type = DEVMM_DEVICE_CPU,
    .options = aligned_options,
    .create = aligned_create,
    .option_help = aligned_help,
};
static const devmm_resource_kind mmap_kind = {
    .struct_size = sizeof(devmm_resource_kind),
    .name = "cpu.mmap",
    .description = "anonymous mmap (huge pages, populate)",
    .device_type = DEVMM_DEVICE_CPU,
    .options = mmap_options,
    .create = mmap_create,
    .option_help = mmap_help,
};
static const devmm_resource_kind shm_kind = {
    .struct_size = sizeof(devmm_resource_kind),
    .name = "cpu.shm",
    .description = "a memfd per allocation, shared with other processes",
    .device_type = DEVMM_DEVICE_CPU,
    .create = shm_create,
};
static const devmm_resource_kind *const kinds[] = {&malloc_kind, &aligned_kind, &mmap_kind,
                                                   &shm_kind};

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
  host = h;
  return &descriptor;
}
