/* The GPU plugin's IPC ledger (ADR 38 §IPC opens, ADR 44): CUDA leaves an exporter's free of
 * memory that an importer still maps undefined, so the exporter's plugin defers that free until the
 * importers have closed or are gone. Each process that exports device memory keeps one sealed
 * memfd (IPCFD_NAME_LEDGER) of LEDGER_SLOTS slots, one per exported allocation: a generation and
 * an anonymous count (8 bytes, the layout older devmm reads and counts in), then, past them, each
 * slot's LEDGER_HOLDERS holder words, each one importing process (its pid and its start time,
 * /proc/<pid>/stat field 22, so that a reused pid is another process). A handle names its slot;
 * an importer's first open of it in a process claims a free holder word with a CAS (if the
 * generation still matches; past LEDGER_HOLDERS, or without a start time, it adds to the anonymous
 * count), its last close clears it. The exporter's free of an allocation still held is deferred;
 * the deferred frees are done at the plugin's next allocation, export or free once no live
 * importer holds them: the holder words of processes that are gone (no such pid, another start
 * time, a zombie) are dropped, checked at most every LEDGER_CHECK_MS. An anonymous hold is
 * released only by its close: one whose importer died keeps the memory until the exporter exits.
 * Cost: 288 KiB of shared memory per exporting process, a lookup per free of <gpu>.device memory,
 * a /proc read per holder word of a deferred free per check, and memory held past its free while
 * an importer maps it. */
#include "gpu_internal.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../common/ipc_fd.h"

#if GPU_HAS_IPC

#define LEDGER_SLOTS 4096
#define LEDGER_HOLDERS 8   /* holder words per slot: 64 bytes, a slot never spans two pages */
#define LEDGER_CHECK_MS 10 /* the least time between two reaps' liveness checks */
#define PID_BITS 22        /* PID_MAX_LIMIT is 2^22; the start time (ticks) takes the other 42 */

typedef struct {
  uint32_t gen;  /* bumped each time the slot names another allocation */
  uint32_t anon; /* importers without a holder word (older devmm's count them here) */
} ledger_slot;
typedef struct {
  uint64_t word[LEDGER_HOLDERS]; /* 0, or start time << PID_BITS | pid of an importer */
} ledger_holders;
#define HOLDERS_AT ((uint64_t)LEDGER_SLOTS * sizeof(ledger_slot))

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

static uint64_t last_check; /* CLOCK_MONOTONIC ms of the last liveness check (under the lock) */

static size_t ledger_bytes(void) { return HOLDERS_AT + LEDGER_SLOTS * sizeof(ledger_holders); }
static ledger_holders *holders_of(void *base, uint32_t slot) {
  return (ledger_holders *)((char *)base + HOLDERS_AT) + slot;
}

/* Process pid's state, thread count and start time from /proc/<pid>/stat; 0, or -1. */
static int proc_stat(int pid, char *state, long *threads, uint64_t *start) {
  char path[40], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "re");
  if (!f)
    return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *p = strrchr(buf, ')'); /* the command may hold spaces and parentheses */
  unsigned long long st;
  if (!p || sscanf(p + 1,
                   " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %ld "
                   "%*d %llu",
                   state, threads, &st) != 3)
    return -1;
  *start = st;
  return 0;
}

/* This process's holder word, or 0 when it has none to give (no /proc, a start past 42 bits). */
static uint64_t own_word(void) {
  char state;
  long threads;
  uint64_t start;
  pid_t pid = getpid();
  if ((uint64_t)pid >> PID_BITS || proc_stat(pid, &state, &threads, &start) ||
      start >> (64 - PID_BITS))
    return 0;
  return start << PID_BITS | (uint64_t)pid;
}

/* Whether the importer of holder word w is gone: no such process, a process of another start
 * time (the pid reused), or a zombie (it exited; a group leader whose other threads still run
 * counts more than one thread). What cannot be read (another user's process under hidepid)
 * counts as live. Tests: sim_ipc_holds. */
static int holder_gone(uint64_t w) {
  int pid = (int)(w & (((uint64_t)1 << PID_BITS) - 1));
  if (kill(pid, 0) != 0 && errno == ESRCH)
    return 1;
  char state;
  long threads;
  uint64_t start;
  if (proc_stat(pid, &state, &threads, &start))
    return 0;
  return start != w >> PID_BITS || ((state == 'Z' || state == 'X') && threads <= 1);
}

/* Whether slot s is still held; when check, the words of gone importers are dropped first. */
static int held(uint32_t s, int check) {
  int any = 0;
  ledger_holders *h = holders_of(ledger, s);
  for (int i = 0; i < LEDGER_HOLDERS; i++) {
    uint64_t w = __atomic_load_n(&h->word[i], __ATOMIC_SEQ_CST);
    if (w && check && holder_gone(w))
      __atomic_compare_exchange_n(&h->word[i], &w, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    else if (w)
      any = 1;
  }
  return any || __atomic_load_n(&ledger[s].anon, __ATOMIC_SEQ_CST) != 0;
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

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
  int check = 0;
  if (pending) {
    uint64_t t = now_ms();
    check = t - last_check >= LEDGER_CHECK_MS;
    if (check)
      last_check = t;
  }
  for (exported **at = &exports; *at;) {
    exported *x = *at;
    if (!x->freed || held(x->slot, check)) {
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

int gpu_ledger_export(int device, void *base, ipcfd_ref *ref, uint32_t *gen, uint32_t *layout) {
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
        __atomic_add_fetch(&ledger[x->slot].gen, 1, __ATOMIC_SEQ_CST);
        x->next = exports;
        exports = x;
      }
    }
    if (x && ipcfd_describe(ledger_fd, x->slot * sizeof(ledger_slot), ref) == 0) {
      *gen = __atomic_load_n(&ledger[x->slot].gen, __ATOMIC_ACQUIRE);
      *layout = GPU_LEDGER_LAYOUT;
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
      if (held(x->slot, 1)) {
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

/* What an importer's join holds: the slot's page, its holders' page, and its word (or none:
 * counted in anon). */
typedef struct {
  ledger_slot *slot;
  uint64_t *word, own;
  void *map[2];
} joined_hold;

static void *map_page(int fd, uint64_t at, size_t page, void **map) {
  uint64_t start = at / page * page;
  char *m = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)start);
  if (m == MAP_FAILED)
    return NULL;
  *map = m;
  return m + (at - start);
}

static void hold_free(joined_hold *j, size_t page) {
  for (int i = 0; i < 2; i++)
    if (j->map[i])
      munmap(j->map[i], page);
  free(j);
}

void *gpu_ledger_join(const ipcfd_ref *ref, int32_t pid, uint32_t gen, uint32_t layout) {
  if (!ref->ino || ref->offset % sizeof(ledger_slot) || ref->offset >= HOLDERS_AT ||
      (layout != 0 && layout != GPU_LEDGER_LAYOUT))
    return NULL; /* none, not a slot, or a layout of a newer devmm (ipc.c refuses it first) */
  char why[256];
  int status;
  static const ipcfd_expect expect = {IPCFD_NAME_LEDGER, "GPU IPC ledger", NULL};
  uint64_t need = layout ? ledger_bytes() - ref->offset : sizeof(ledger_slot);
  int fd = ipcfd_open(ref, pid, need, &expect, &status, why, sizeof why);
  if (fd < 0)
    return NULL;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  joined_hold *j = calloc(1, sizeof *j);
  uint32_t s = (uint32_t)(ref->offset / sizeof(ledger_slot));
  if (j)
    j->slot = map_page(fd, ref->offset, page, &j->map[0]);
  ledger_holders *h = NULL;
  if (j && j->slot && layout)
    h = map_page(fd, HOLDERS_AT + (uint64_t)s * sizeof(ledger_holders), page, &j->map[1]);
  close(fd);
  if (!j || !j->slot || (layout && !h) || __atomic_load_n(&j->slot->gen, __ATOMIC_SEQ_CST) != gen) {
    if (j)
      hold_free(j, page);
    return NULL; /* the exporter has freed it: the runtime's open says so */
  }
  j->own = h ? own_word() : 0;
  for (int i = 0; j->own && !j->word && i < LEDGER_HOLDERS; i++) {
    uint64_t w = __atomic_load_n(&h->word[i], __ATOMIC_SEQ_CST);
    /* a free word, or one of a gone importer (ADR 44: its exporter may not have looked yet) */
    if ((w == 0 || holder_gone(w)) &&
        __atomic_compare_exchange_n(&h->word[i], &w, j->own, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
      j->word = &h->word[i];
  }
  if (!j->word)
    __atomic_add_fetch(&j->slot->anon, 1, __ATOMIC_SEQ_CST);
  return j;
}

void gpu_ledger_leave(void *joined) {
  if (!joined)
    return;
  joined_hold *j = joined;
  if (j->word) {
    uint64_t w = j->own; /* not ours any more only if the exporter took us for gone */
    __atomic_compare_exchange_n(j->word, &w, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  } else {
    __atomic_sub_fetch(&j->slot->anon, 1, __ATOMIC_SEQ_CST);
  }
  hold_free(j, (size_t)sysconf(_SC_PAGESIZE));
}

#endif
