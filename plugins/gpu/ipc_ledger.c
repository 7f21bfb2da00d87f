/* The GPU plugin's IPC ledger (ADR 38 §IPC opens): CUDA leaves an exporter's free of memory that
 * an importer still maps undefined, so the exporter's plugin defers that free until the importers
 * have closed. Each process that exports device memory keeps one sealed memfd of slots
 * (IPCFD_NAME_LEDGER, LEDGER_SLOTS of them), one per exported allocation: a generation and the
 * count of importing processes that map it. A handle names its slot; an importer's first open of
 * it in a process adds one (if the generation still matches), its last close takes it away. The
 * exporter's free of an allocation whose count is not 0 is deferred; the deferred frees are done
 * at the plugin's next allocation, export or free once their count is 0, else when the process
 * exits. Cost: 32 KiB of shared memory per exporting process, a lookup per free of <gpu>.device
 * memory, and memory held past its free while an importer maps it (an importer that dies without
 * closing keeps it until the exporter exits). */
#include "gpu_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../common/ipc_fd.h"

#if GPU_HAS_IPC

#define LEDGER_SLOTS 4096

typedef struct {
  uint32_t gen;  /* bumped each time the slot names another allocation */
  uint32_t live; /* importing processes that map it */
} ledger_slot;

/* An exported allocation of this process: its slot, and whether its owner freed it already. */
typedef struct exported {
  struct exported *next;
  void *base;
  int device;
  uint32_t slot;
  int freed; /* the owner's free came while importers mapped it: done when live is 0 */
} exported;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int ledger_fd = -1;
static ledger_slot *ledger; /* LEDGER_SLOTS, shared with importers */
static exported *exports;
static uint32_t next_slot;
static int pending; /* frees deferred (read without the lock by gpu_ledger_reap) */

static size_t ledger_bytes(void) { return LEDGER_SLOTS * sizeof(ledger_slot); }

/* The ledger, made on the first export; 0, or -1 (the export then goes without one). */
static int ledger_ready(void) {
  if (ledger)
    return 0;
  int fd = memfd_create(IPCFD_NAME_LEDGER, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return -1;
  void *m = MAP_FAILED;
  if (ftruncate(fd, (off_t)ledger_bytes()) == 0 && ipcfd_seal(fd) == 0)
    m = mmap(NULL, ledger_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    close(fd);
    return -1;
  }
  ledger_fd = fd;
  ledger = m;
  return 0;
}

/* Frees, with its device current, every deferred allocation no importer maps any more. Caller
 * holds the lock. */
static void reap(void) {
  int left = 0;
  for (exported **at = &exports; *at;) {
    exported *x = *at;
    if (!x->freed || __atomic_load_n(&ledger[x->slot].live, __ATOMIC_ACQUIRE) != 0) {
      left += x->freed;
      at = &x->next;
      continue;
    }
    *at = x->next;
    __atomic_add_fetch(&ledger[x->slot].gen, 1, __ATOMIC_RELEASE);
    int prev;
    if (gpu_enter(x->device, &prev) == gpuSuccess) {
      gpuFree(x->base); /* nobody to report a failure to: the owner's free returned long ago */
      gpu_leave(prev);
    }
    free(x);
  }
  __atomic_store_n(&pending, left, __ATOMIC_RELEASE);
}

void gpu_ledger_reap(void) {
  if (!__atomic_load_n(&pending, __ATOMIC_ACQUIRE))
    return; /* the allocations' fast path: one load */
  pthread_mutex_lock(&lock);
  reap();
  pthread_mutex_unlock(&lock);
}

int gpu_ledger_export(int device, void *base, ipcfd_ref *ref, uint32_t *gen) {
  pthread_mutex_lock(&lock);
  int rc = -1;
  if (ledger_ready() == 0) {
    reap();
    exported *x = exports;
    while (x && !(x->base == base && x->device == device && !x->freed))
      x = x->next;
    if (!x && (x = calloc(1, sizeof *x)) != NULL) {
      /* a free slot: one no export of ours names (at most LEDGER_SLOTS exports at once) */
      for (uint32_t tries = 0; tries < LEDGER_SLOTS; tries++, next_slot++) {
        uint32_t s = next_slot % LEDGER_SLOTS;
        exported *y = exports;
        while (y && y->slot != s)
          y = y->next;
        if (!y) {
          x->slot = s;
          break;
        }
        if (tries + 1 == LEDGER_SLOTS) {
          free(x);
          x = NULL;
        }
      }
      if (x) {
        next_slot++;
        x->base = base;
        x->device = device;
        __atomic_add_fetch(&ledger[x->slot].gen, 1, __ATOMIC_RELEASE);
        __atomic_store_n(&ledger[x->slot].live, 0, __ATOMIC_RELEASE);
        x->next = exports;
        exports = x;
      }
    }
    if (x && ipcfd_describe(ledger_fd, x->slot * sizeof(ledger_slot), ref) == 0) {
      *gen = __atomic_load_n(&ledger[x->slot].gen, __ATOMIC_ACQUIRE);
      rc = 0;
    }
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

int gpu_ledger_defer_free(int device, void *ptr) {
  pthread_mutex_lock(&lock);
  int deferred = 0;
  if (ledger) {
    reap();
    for (exported **at = &exports; *at; at = &(*at)->next) {
      exported *x = *at;
      if (x->base != ptr || x->device != device || x->freed)
        continue;
      if (__atomic_load_n(&ledger[x->slot].live, __ATOMIC_ACQUIRE) != 0) {
        x->freed = 1; /* reap frees it once the importers closed */
        deferred = 1;
        __atomic_store_n(&pending, 1, __ATOMIC_RELEASE);
      } else {
        *at = x->next;
        __atomic_add_fetch(&ledger[x->slot].gen, 1, __ATOMIC_RELEASE); /* its handles: stale */
        free(x);
      }
      break;
    }
  }
  pthread_mutex_unlock(&lock);
  return deferred;
}

int gpu_ledger_freed(int device, const void *base) {
  pthread_mutex_lock(&lock);
  const exported *x = exports;
  while (x && !(x->base == base && x->device == device && x->freed))
    x = x->next;
  pthread_mutex_unlock(&lock);
  return x != NULL;
}

void *gpu_ledger_join(const ipcfd_ref *ref, int32_t pid, uint32_t gen) {
  if (!ref->ino || ref->offset % sizeof(ledger_slot) || ref->offset >= ledger_bytes())
    return NULL; /* none, or not a slot */
  char why[256];
  int status;
  static const ipcfd_expect ledger = {IPCFD_NAME_LEDGER, "GPU IPC ledger", NULL};
  int fd = ipcfd_open(ref, pid, sizeof(ledger_slot), &ledger, &status, why, sizeof why);
  if (fd < 0)
    return NULL;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uint64_t start = ref->offset / page * page;
  char *m = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)start);
  close(fd);
  if (m == MAP_FAILED)
    return NULL;
  ledger_slot *s = (ledger_slot *)(m + (ref->offset - start));
  if (__atomic_load_n(&s->gen, __ATOMIC_ACQUIRE) != gen) {
    munmap(m, page);
    return NULL; /* the exporter has freed it: the runtime's open says so */
  }
  __atomic_add_fetch(&s->live, 1, __ATOMIC_ACQ_REL);
  return s;
}

void gpu_ledger_leave(void *joined) {
  if (!joined)
    return;
  ledger_slot *s = joined;
  __atomic_sub_fetch(&s->live, 1, __ATOMIC_ACQ_REL);
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  munmap((void *)((uintptr_t)s / page * page), page);
}

#endif
