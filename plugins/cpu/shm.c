/* cpu.shm: a memfd per allocation, mapped MAP_SHARED: memory other processes can open
 * (devmm_ipc_get_handle / devmm_ipc_open, ADR 30; plugins/common/ipc_fd.h checks what a handle
 * names before anything opens).
 *
 * Each allocation is a memfd of its own, mapped MAP_SHARED; the descriptor stays open while the
 * allocation lives, so that another process can reopen it through /proc/<pid>/fd/<n> (ADR 30:
 * no name in /dev/shm that a crash would leave behind; the kernel drops the memory when the last
 * descriptor and mapping go). The live allocations are a small table under a mutex: a handle may
 * name a range inside one. The mappings opened from handles are in it too, each with its own
 * descriptor: a mapping exports again, as a handle naming this process (ADR 33 decision 3; the
 * ipc suite's shm_mappings_export_again), and outlives the exporter's free. Each memfd is sealed
 * against shrinking. */
#include "cpu_internal.h"

#include <devmm/ipc.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "../common/ipc_fd.h"

typedef struct {
  char *base;
  size_t len;
  int fd;
  int imported;      /* a mapping opened from a handle (closed by its close, never deallocated) */
  uint64_t file_off; /* the file offset base maps */
  size_t limit;      /* the bytes a handle may name from base: the allocation's, or the mapping's */
  uint8_t token[IPCFD_TOKEN_BYTES]; /* the memfd's token, in its name (ipc_fd.h, ADR 40) */
} shm_block;

/* A cpu.shm handle's payload: the file, and the token only the export gives out. */
typedef struct {
  ipcfd_ref ref;
  uint8_t token[IPCFD_TOKEN_BYTES];
} shm_payload;
_Static_assert(sizeof(shm_payload) <= DEVMM_IPC_PAYLOAD_SIZE, "a cpu.shm payload fits a handle");

static pthread_mutex_t shm_lock = PTHREAD_MUTEX_INITIALIZER;
static shm_block *shm_blocks;
static size_t shm_count, shm_cap;

/* "32.0 TiB" */
static const char *shm_size(double v, char *buf, size_t cap) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (v >= 1024 && u < 6)
    v /= 1024, u++;
  snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

/* A memfd is created and mapped whatever its size: past what memory and swap hold, the first
 * touch of a page that cannot be backed is a SIGBUS. Refused here instead
 * (test_cpu_shm_refuses_more_than_the_machine_has). */
static int shm_fits(size_t len) {
  struct sysinfo si;
  if (sysinfo(&si) != 0)
    return DEVMM_OK;
  double have = ((double)si.totalram + (double)si.totalswap) * (double)si.mem_unit;
  if ((double)len <= have)
    return DEVMM_OK;
  char want[32], got[32];
  return cpu_host->set_error(DEVMM_ENOMEM,
                             "out of memory: cpu.shm: %s is more than this machine's memory and "
                             "swap (%s): its pages could never all be backed",
                             shm_size((double)len, want, sizeof want),
                             shm_size(have, got, sizeof got));
}

static int shm_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream s,
                        void **out) {
  (void)self;
  *out = NULL;
  if (s)
    return cpu_check_stream("cpu.shm", s);
  if (shm_fits(bytes) != DEVMM_OK)
    return DEVMM_ENOMEM;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t len = cpu_round_up(bytes, page), extra = align > page ? align : 0;
  uint8_t token[IPCFD_TOKEN_BYTES];
  int te = ipcfd_new_token(token);
  if (te)
    return cpu_host->set_error(DEVMM_EIO, "cpu.shm: cannot draw the allocation's token: %s",
                               strerror(te));
  char name[96];
  ipcfd_token_name(name, sizeof name, IPCFD_NAME_CPU, token, bytes);
  int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return cpu_host->set_error(
        errno == EMFILE || errno == ENFILE ? DEVMM_ENOMEM : DEVMM_EIO,
        "%scpu.shm: memfd_create failed: %s%s",
        errno == EMFILE || errno == ENFILE ? "out of memory: " : "", strerror(errno),
        errno == EMFILE ? " (each live cpu.shm allocation holds a descriptor: "
                          "raise ulimit -n)"
                        : "");
  char *p = MAP_FAILED;
  if (ftruncate(fd, (off_t)len) == 0 && ipcfd_seal(fd) == 0) {
    /* reserve len + extra, then put the file at an aligned address inside */
    char *area =
        extra ? mmap(NULL, len + extra, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) : NULL;
    if (area != MAP_FAILED) {
      char *at = extra ? (char *)cpu_round_up((uintptr_t)area, align) : NULL;
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
  if (ok) {
    shm_blocks[shm_count] = (shm_block){p, len, fd, 0, 0, bytes, {0}};
    memcpy(shm_blocks[shm_count++].token, token, sizeof token);
  }
  pthread_mutex_unlock(&shm_lock);
  if (!ok) {
    int e = errno;
    if (p != MAP_FAILED)
      munmap(p, len);
    close(fd);
    return cpu_host->set_error(DEVMM_ENOMEM, "out of memory: cpu.shm could not map %zu bytes: %s",
                               len, strerror(e));
  }
  *out = p;
  return DEVMM_OK;
}

static int shm_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                          devmm_stream s) {
  (void)self, (void)bytes, (void)align, (void)s;
  pthread_mutex_lock(&shm_lock);
  shm_block b = {NULL, 0, -1, 0, 0, 0, {0}};
  for (size_t i = 0; i < shm_count; i++)
    if (shm_blocks[i].base == ptr && !shm_blocks[i].imported) {
      b = shm_blocks[i];
      shm_blocks[i] = shm_blocks[--shm_count];
      break;
    }
  pthread_mutex_unlock(&shm_lock);
  if (!b.base)
    return cpu_host->set_error(DEVMM_EINVAL, "cpu.shm: %p is not a live cpu.shm allocation", ptr);
  munmap(b.base, b.len); /* an importer's mapping keeps the memory until it closes */
  close(b.fd);
  return DEVMM_OK;
}

static int shm_get_handle(devmm_resource *self, void *ptr, size_t bytes, unsigned char *payload) {
  (void)self;
  const char *p = ptr;
  int err = EINVAL;
  shm_payload pl;
  memset(&pl, 0, sizeof pl);
  pthread_mutex_lock(&shm_lock);
  for (size_t i = 0; i < shm_count; i++) {
    shm_block *b = &shm_blocks[i];
    if (p >= b->base && p < b->base + b->len) {
      err = (size_t)(p - b->base) <= b->limit && bytes <= b->limit - (size_t)(p - b->base)
                ? ipcfd_describe(b->fd, b->file_off + (uint64_t)(p - b->base), &pl.ref)
                : ERANGE;
      memcpy(pl.token, b->token, sizeof pl.token);
      break;
    }
  }
  pthread_mutex_unlock(&shm_lock);
  if (err == ERANGE)
    return cpu_host->set_error(DEVMM_EINVAL, "cpu.shm: [%p, +%zu) runs past its allocation", ptr,
                               bytes);
  if (err)
    return cpu_host->set_error(DEVMM_EINVAL,
                               "cpu.shm: %p is not inside a live cpu.shm allocation%s%s", ptr,
                               err == EINVAL ? "" : ": ", err == EINVAL ? "" : strerror(err));
  memcpy(payload, &pl, sizeof pl);
  return DEVMM_OK;
}

/* Maps bytes at pl->ref.offset of fd (owned: kept with the mapping, closed on failure). */
static int shm_map(const shm_payload *pl, size_t bytes, int fd, void **out, void **token);

static int shm_open_handle(devmm_resource *self, const unsigned char *payload, size_t bytes,
                           int32_t pid, void **out, void **token) {
  (void)self;
  shm_payload pl;
  memcpy(&pl, payload, sizeof pl);
  char why[320];
  int status;
  ipcfd_expect x = {IPCFD_NAME_CPU, "cpu.shm", pl.token};
  int fd = ipcfd_open(&pl.ref, pid, bytes, &x, &status, why, sizeof why);
  if (fd < 0)
    return cpu_host->set_error(status, "cpu.shm: cannot open the IPC handle: %s", why);
  return shm_map(&pl, bytes, fd, out, token);
}

static int shm_open_fd(devmm_resource *self, const unsigned char *payload, size_t bytes, int given,
                       void **out, void **token) {
  (void)self;
  shm_payload pl;
  memcpy(&pl, payload, sizeof pl);
  char why[320];
  int status;
  ipcfd_expect x = {IPCFD_NAME_CPU, "cpu.shm", pl.token};
  int fd = ipcfd_adopt(&pl.ref, given, bytes, &x, &status, why, sizeof why);
  if (fd < 0)
    return cpu_host->set_error(status, "cpu.shm: cannot open the IPC handle: %s", why);
  return shm_map(&pl, bytes, fd, out, token);
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
    return cpu_host->set_error(
        DEVMM_EINVAL,
        "cpu.shm: the handle's descriptor %d is no live cpu.shm allocation or "
        "mapping of this process (freed?)",
        (int)ref.fd);
  *fd = ref.fd;
  return DEVMM_OK;
}

static int shm_map(const shm_payload *pl, size_t bytes, int fd, void **out, void **token) {
  ipcfd_ref ref = pl->ref;
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
    if ((ok = shm_count < shm_cap) != 0) {
      shm_blocks[shm_count] = (shm_block){m, len, fd, 1, start, len, {0}};
      memcpy(shm_blocks[shm_count++].token, pl->token, sizeof pl->token);
    }
    pthread_mutex_unlock(&shm_lock);
    if (!ok) {
      munmap(m, len);
      e = ENOMEM;
    }
  }
  if (!ok) {
    close(fd);
    return cpu_host->set_error(DEVMM_ENOMEM,
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
    return cpu_host->set_error(DEVMM_EINVAL, "cpu.shm: unmapping an IPC mapping at %p failed: %s",
                               ptr, strerror(errno));
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
  if (cpu_device_zero("cpu.shm", id))
    return DEVMM_EINVAL;
  return h->resource_create(&shm_ops, NULL, CPU0, "cpu.shm", CPU_FLAGS, out);
}

const devmm_resource_kind cpu_shm_kind = {
    .struct_size = sizeof(devmm_resource_kind),
    .name = "cpu.shm",
    .description = "a memfd per allocation, shared with other processes",
    .device_type = DEVMM_DEVICE_CPU,
    .create = shm_create,
};
