/* The simulated accelerator runtime (see simrt.h): device memory behind PROT_NONE, streams as
 * worker-thread queues with seeded jitter, events, stream-ordered pools that poison on free.
 *
 * One mutex (rt.lock) guards all bookkeeping; one condition variable (rt.progress) is
 * broadcast whenever any stream finishes an operation, and every wait (a stream waiting for an
 * event or another stream, the host synchronising) re-checks its condition under the lock.
 * Streams, events and pools are never freed: a destroyed one stays in its list, marked, so a
 * later use is detected instead of reading freed memory. */
#include "simrt.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../ipc_fd.h"

#define SIM_MAX_DEVICES 16
#define SIM_ALIGN 256
#define FILL_NEW 0xCD
#define FILL_FREED 0xDD

enum { B_FREE, B_LIVE, B_FREEING, B_QUARANTINE };

typedef struct block {
  size_t off, size;
  int state;
  struct simMemPool *pool;
  uint64_t release_ns;          /* B_QUARANTINE: reusable from then on */
  struct simStream *freeing_on; /* B_FREEING: the stream its free is queued on */
  uint64_t gen;                 /* bumped each time the block is handed out */
} block;

struct simMemPool {
  int device, is_default, destroyed;
  size_t used, max_size;
  uint64_t release_threshold;
  struct simMemPool *next;
};

typedef struct device {
  int ready;
  int fd; /* the memfd, kept open for IPC handles */
  char *pub, *priv;
  size_t size;
  block *blocks;
  size_t nblocks, cap;
  struct simStream *legacy;
  struct simMemPool default_pool;
} device;

enum { OP_COPY, OP_MEMSET, OP_KERNEL, OP_FREE, OP_RECORD, OP_WAIT_EVENT, OP_WAIT_STREAM };

typedef struct op {
  int kind;
  struct op *next;
  void *dst;
  const void *src;
  size_t n;
  int value;
  void (*fn)(void *);
  void *user;
  int device;   /* OP_FREE */
  size_t off;   /* OP_FREE */
  uint64_t gen; /* OP_FREE: the allocation it frees */
  struct simEvent *event;
  struct simStream *stream; /* OP_WAIT_STREAM */
  uint64_t target;
} op;

struct simStream {
  int device;
  unsigned flags;
  int legacy, per_thread, destroyed;
  op *head, *tail;
  uint64_t submitted, done;
  uint64_t serial, rng, rng_epoch;
  pthread_cond_t work;
  struct simStream *next;
};

struct simEvent {
  int device, destroyed;
  uint64_t recorded, completed;
  struct simEvent *next;
};

typedef struct region {
  char *ptr;
  size_t size;
  int managed, device;
} region;

/* Device memory of another process, opened from an IPC handle: [ptr, ptr + size) inside the
 * mappings pub_map (PROT_NONE) and priv_map (the runtime's view), map_len bytes each. */
typedef struct import {
  char *pub_map, *priv_map, *ptr;
  size_t map_len, size;
  int device;
} import;

typedef struct injection {
  char call[40];
  int skip, error;
} injection;

static struct {
  pthread_mutex_t lock;
  pthread_cond_t progress;
  int ndevices;
  size_t memory;
  unsigned jitter_us;
  uint64_t seed, epoch;
  device devs[SIM_MAX_DEVICES];
  region *regions;
  size_t nregions, rcap;
  import *imports;
  size_t nimports, icap;
  struct simStream *streams;
  struct simEvent *events;
  struct simMemPool *pools;
  uint64_t serial;
  injection inj[8];
  int ninj;
  /* counters for devmm_sim_stats */
  uint64_t streams_created, streams_live, events_created, events_live, frees_pending;
} rt = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .progress = PTHREAD_COND_INITIALIZER,
    .ndevices = 2,
    .memory = (size_t)256 << 20,
    .jitter_us = 50,
    .seed = 1,
};

static __thread int tls_device;             /* the current device */
static __thread int tls_kernel_device = -1; /* the device of the kernel this worker runs */
static __thread struct simStream *tls_per_thread[SIM_MAX_DEVICES];
static pthread_key_t per_thread_key;
static pthread_once_t per_thread_once = PTHREAD_ONCE_INIT;

/* ------------------------------------------------------------------ errors, injection */

static const struct {
  simError_t e;
  const char *name, *text;
} errors[] = {
    {simSuccess, "simSuccess", "no error"},
    {simErrorInvalidValue, "simErrorInvalidValue", "invalid argument"},
    {simErrorMemoryAllocation, "simErrorMemoryAllocation", "out of memory"},
    {simErrorInitializationError, "simErrorInitializationError", "initialization error"},
    {simErrorInsufficientDriver, "simErrorInsufficientDriver",
     "simulated driver version is insufficient"},
    {simErrorNoDevice, "simErrorNoDevice", "no sim device is configured (devices = 0)"},
    {simErrorInvalidDevice, "simErrorInvalidDevice", "invalid device ordinal"},
    {simErrorInvalidResourceHandle, "simErrorInvalidResourceHandle",
     "invalid resource handle (a destroyed stream or event, or one of another device)"},
    {simErrorNotReady, "simErrorNotReady", "device not ready (objects are still live)"},
    {simErrorNotSupported, "simErrorNotSupported", "operation not supported"},
    {simErrorUnknown, "simErrorUnknown", "unknown error"},
};

const char *simGetErrorName(simError_t e) {
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
    if (errors[i].e == e)
      return errors[i].name;
  return "simErrorUnknown";
}

const char *simGetErrorString(simError_t e) {
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
    if (errors[i].e == e)
      return errors[i].text;
  return "unknown error";
}

static volatile int any_injection;

/* Called first by every injectable entry point: an armed injection for `call` fires here. */
static simError_t injected(const char *call) {
  if (!__atomic_load_n(&any_injection, __ATOMIC_ACQUIRE))
    return simSuccess;
  simError_t e = simSuccess;
  pthread_mutex_lock(&rt.lock);
  for (int i = 0; i < rt.ninj; i++)
    if (strcmp(rt.inj[i].call, call) == 0) {
      if (rt.inj[i].skip-- > 0)
        break;
      e = (simError_t)rt.inj[i].error;
      rt.inj[i] = rt.inj[--rt.ninj];
      break;
    }
  __atomic_store_n(&any_injection, rt.ninj > 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&rt.lock);
  return e;
}

#define INJECT(call)                                                                               \
  do {                                                                                             \
    simError_t inj_ = injected(call);                                                              \
    if (inj_ != simSuccess)                                                                        \
      return inj_;                                                                                 \
  } while (0)

int sim__inject(const char *call, int skip, int error) {
  pthread_mutex_lock(&rt.lock);
  int rc = 0;
  if (!call) {
    rt.ninj = 0;
  } else if (rt.ninj == (int)(sizeof rt.inj / sizeof rt.inj[0]) ||
             strlen(call) >= sizeof rt.inj[0].call) {
    rc = -1;
  } else {
    injection *j = &rt.inj[rt.ninj++];
    snprintf(j->call, sizeof j->call, "%s", call);
    j->skip = skip;
    j->error = error;
  }
  __atomic_store_n(&any_injection, rt.ninj > 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&rt.lock);
  return rc;
}

/* ------------------------------------------------------------------ time, randomness */

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t splitmix(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* A delay in [0, max_us] from the stream's generator (seeded from seed and the stream's serial
 * number, re-seeded when the seed changes). Caller holds the lock. */
static unsigned stream_delay_us(struct simStream *s, unsigned max_us) {
  if (s->rng_epoch != rt.epoch + 1) {
    s->rng = rt.seed * 0x2545F4914F6CDD1Dull + s->serial;
    s->rng_epoch = rt.epoch + 1;
  }
  return max_us ? (unsigned)(splitmix(&s->rng) % ((uint64_t)max_us + 1)) : 0;
}

static void sleep_us(unsigned us) {
  if (!us)
    return;
  struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* ------------------------------------------------------------------ devices and blocks */

static simError_t device_ready(int d) {
  device *dv = &rt.devs[d];
  if (dv->ready)
    return simSuccess;
  int fd = memfd_create(IPCFD_NAME_SIM, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return simErrorInitializationError;
  if (ftruncate(fd, (off_t)rt.memory) != 0 || ipcfd_seal(fd) != 0) {
    close(fd);
    return simErrorInitializationError;
  }
  /* the address handed out faults on any host access; the runtime uses the private view */
  char *pub = mmap(NULL, rt.memory, PROT_NONE, MAP_SHARED, fd, 0);
  char *priv = mmap(NULL, rt.memory, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  block *b = malloc(16 * sizeof *b);
  if (pub == MAP_FAILED || priv == MAP_FAILED || !b) {
    close(fd);
    if (pub != MAP_FAILED)
      munmap(pub, rt.memory);
    if (priv != MAP_FAILED)
      munmap(priv, rt.memory);
    free(b);
    return simErrorInitializationError;
  }
  dv->fd = fd;
  dv->pub = pub;
  dv->priv = priv;
  dv->size = rt.memory;
  dv->blocks = b;
  dv->cap = 16;
  dv->nblocks = 1;
  b[0] = (block){0, rt.memory, B_FREE, NULL, 0, NULL, 0};
  dv->default_pool = (struct simMemPool){.device = d, .is_default = 1};
  dv->ready = 1;
  return simSuccess;
}

static void device_teardown(int d) {
  device *dv = &rt.devs[d];
  if (!dv->ready)
    return;
  munmap(dv->pub, dv->size);
  munmap(dv->priv, dv->size);
  close(dv->fd);
  free(dv->blocks);
  struct simStream *legacy = dv->legacy; /* its worker stays idle: streams are never freed */
  memset(dv, 0, sizeof *dv);
  dv->legacy = legacy;
}

/* The device whose public range holds p, or -1. */
static int device_of(const void *p) {
  for (int d = 0; d < SIM_MAX_DEVICES; d++) {
    device *dv = &rt.devs[d];
    if (dv->ready && (const char *)p >= dv->pub && (const char *)p < dv->pub + dv->size)
      return d;
  }
  return -1;
}

/* Index of the block containing offset off. */
static size_t block_at(device *dv, size_t off) {
  size_t lo = 0, hi = dv->nblocks;
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (dv->blocks[mid].off <= off)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

static void merge_free(device *dv, size_t i) {
  if (i + 1 < dv->nblocks && dv->blocks[i + 1].state == B_FREE) {
    dv->blocks[i].size += dv->blocks[i + 1].size;
    memmove(&dv->blocks[i + 1], &dv->blocks[i + 2], (dv->nblocks - i - 2) * sizeof(block));
    dv->nblocks--;
  }
  if (i > 0 && dv->blocks[i - 1].state == B_FREE) {
    dv->blocks[i - 1].size += dv->blocks[i].size;
    memmove(&dv->blocks[i], &dv->blocks[i + 1], (dv->nblocks - i - 1) * sizeof(block));
    dv->nblocks--;
  }
}

static void release_block(device *dv, size_t i) {
  dv->blocks[i].state = B_FREE;
  dv->blocks[i].pool = NULL;
  merge_free(dv, i);
}

/* Quarantined blocks whose delay has passed (all of them if `all`) become free again. */
static void release_quarantine(device *dv, int all) {
  uint64_t t = now_ns();
  for (size_t i = 0; i < dv->nblocks; i++)
    if (dv->blocks[i].state == B_QUARANTINE && (all || dv->blocks[i].release_ns <= t)) {
      size_t before = dv->nblocks;
      release_block(dv, i);
      i -= before - dv->nblocks; /* merged with the previous block: look at it again */
      if (i == (size_t)-1)
        i = 0;
    }
}

/* Allocates n bytes of device d for pool (NULL: simMalloc). An allocation ordered on stream s
 * may take, at once, a block of the same size whose free is queued on s and has not run yet:
 * stream order puts that free before any work queued on s later, as CUDA's pools allow. */
static simError_t block_alloc(int d, size_t n, struct simMemPool *pool, struct simStream *s,
                              void **out) {
  simError_t e = device_ready(d);
  if (e)
    return e;
  device *dv = &rt.devs[d];
  size_t need = n ? (n + SIM_ALIGN - 1) / SIM_ALIGN * SIM_ALIGN : SIM_ALIGN;
  if (need < n)
    return simErrorMemoryAllocation;
  for (size_t i = 0; s && pool && i < dv->nblocks; i++) {
    block *b = &dv->blocks[i];
    if (b->state == B_FREEING && b->freeing_on == s && b->pool == pool && b->size == need) {
      b->state = B_LIVE; /* its pending free still poisons it, in s's order */
      b->gen++;
      *out = dv->pub + b->off;
      return simSuccess;
    }
  }
  if (pool && pool->max_size && pool->used + need > pool->max_size)
    return simErrorMemoryAllocation;
  release_quarantine(dv, 0);
  for (int attempt = 0; attempt < 2; attempt++) {
    for (size_t i = 0; i < dv->nblocks; i++) {
      block *b = &dv->blocks[i];
      if (b->state != B_FREE || b->size < need)
        continue;
      if (b->size > need) { /* split */
        if (dv->nblocks == dv->cap) {
          block *g = realloc(dv->blocks, dv->cap * 2 * sizeof *g);
          if (!g)
            return simErrorMemoryAllocation;
          dv->blocks = g;
          dv->cap *= 2;
          b = &dv->blocks[i];
        }
        memmove(&dv->blocks[i + 2], &dv->blocks[i + 1], (dv->nblocks - i - 1) * sizeof(block));
        dv->nblocks++;
        dv->blocks[i + 1] = (block){b->off + need, b->size - need, B_FREE, NULL, 0, NULL, 0};
        b->size = need;
      }
      b->state = B_LIVE;
      b->pool = pool;
      b->gen++;
      if (pool)
        pool->used += need;
      memset(dv->priv + b->off, FILL_NEW, need); /* uninitialised memory is visible as 0xCD */
      *out = dv->pub + b->off;
      return simSuccess;
    }
    release_quarantine(dv, 1); /* a real pool would also reuse frees that have completed */
  }
  return simErrorMemoryAllocation;
}

/* The live block that starts exactly at p (device memory), or NULL. */
static block *live_block(const void *p, int *dev) {
  int d = device_of(p);
  if (d < 0)
    return NULL;
  device *dv = &rt.devs[d];
  size_t off = (size_t)((const char *)p - dv->pub);
  block *b = &dv->blocks[block_at(dv, off)];
  if (b->off != off || b->state != B_LIVE)
    return NULL;
  *dev = d;
  return b;
}

static region *find_region(const void *p, size_t n) {
  for (size_t i = 0; i < rt.nregions; i++) {
    region *r = &rt.regions[i];
    if ((const char *)p >= r->ptr && (const char *)p < r->ptr + r->size)
      return (size_t)((const char *)p - r->ptr) + n <= r->size ? r : NULL;
  }
  return NULL;
}

static import *find_import(const void *p) {
  for (size_t i = 0; i < rt.nimports; i++)
    if ((const char *)p >= rt.imports[i].ptr &&
        (const char *)p < rt.imports[i].ptr + rt.imports[i].size)
      return &rt.imports[i];
  return NULL;
}

static int in_any_region(const void *p) {
  for (size_t i = 0; i < rt.nregions; i++)
    if ((const char *)p >= rt.regions[i].ptr &&
        (const char *)p < rt.regions[i].ptr + rt.regions[i].size)
      return 1;
  return 0;
}

/* The address the runtime uses for [p, p+n) at enqueue time: device memory must lie inside one
 * live allocation; managed/pinned regions must contain the range; other addresses are host
 * (pageable) memory. *dev is the device of device memory, else -1. */
static simError_t resolve(const void *p, size_t n, char **addr, int *dev) {
  *dev = device_of(p);
  if (*dev >= 0) {
    device *dv = &rt.devs[*dev];
    size_t off = (size_t)((const char *)p - dv->pub);
    block *b = &dv->blocks[block_at(dv, off)];
    if (b->state != B_LIVE || off + n > b->off + b->size || off + n < off)
      return simErrorInvalidValue; /* not (all) inside a live allocation */
    *addr = dv->priv + off;
    return simSuccess;
  }
  const import *im = find_import(p);
  if (im) {
    size_t off = (size_t)((const char *)p - im->ptr);
    if (off + n > im->size || off + n < off)
      return simErrorInvalidValue;
    *addr = im->priv_map + (size_t)((const char *)p - im->pub_map);
    *dev = im->device;
    return simSuccess;
  }
  if (in_any_region(p) && !find_region(p, n))
    return simErrorInvalidValue;
  *addr = (char *)p;
  return simSuccess;
}

static simError_t add_region(size_t n, int managed, void **out) {
  size_t len = n ? n : 1;
  if (rt.nregions == rt.rcap) {
    size_t cap = rt.rcap ? rt.rcap * 2 : 16;
    region *g = realloc(rt.regions, cap * sizeof *g);
    if (!g)
      return simErrorMemoryAllocation;
    rt.regions = g;
    rt.rcap = cap;
  }
  char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return simErrorMemoryAllocation;
  memset(p, FILL_NEW, len);
  rt.regions[rt.nregions++] = (region){p, len, managed, tls_device};
  *out = p;
  return simSuccess;
}

static simError_t drop_region(void *p, int managed) {
  for (size_t i = 0; i < rt.nregions; i++)
    if (rt.regions[i].ptr == p) {
      if (rt.regions[i].managed != managed)
        return simErrorInvalidValue;
      munmap(rt.regions[i].ptr, rt.regions[i].size);
      rt.regions[i] = rt.regions[--rt.nregions];
      return simSuccess;
    }
  return simErrorInvalidValue;
}

/* ------------------------------------------------------------------ streams */

static void *worker(void *arg);

static void per_thread_exit(void *unused) {
  (void)unused;
  pthread_mutex_lock(&rt.lock);
  for (int d = 0; d < SIM_MAX_DEVICES; d++)
    if (tls_per_thread[d]) { /* queued work still runs; the worker then exits */
      tls_per_thread[d]->destroyed = 1;
      pthread_cond_signal(&tls_per_thread[d]->work);
      tls_per_thread[d] = NULL;
    }
  pthread_mutex_unlock(&rt.lock);
}

static void make_key(void) { pthread_key_create(&per_thread_key, per_thread_exit); }

/* A new stream with its worker thread. Caller holds the lock. */
static simError_t new_stream(int d, unsigned flags, int legacy, int per_thread,
                             struct simStream **out) {
  struct simStream *s = calloc(1, sizeof *s);
  if (!s)
    return simErrorMemoryAllocation;
  s->device = d;
  s->flags = flags;
  s->legacy = legacy;
  s->per_thread = per_thread;
  s->serial = ++rt.serial;
  pthread_cond_init(&s->work, NULL);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 256 << 10);
  pthread_t t;
  int rc = pthread_create(&t, &attr, worker, s);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    pthread_cond_destroy(&s->work);
    free(s);
    return simErrorMemoryAllocation;
  }
  s->next = rt.streams;
  rt.streams = s;
  *out = s;
  return simSuccess;
}

/* The stream a handle names, for the calling thread. Caller holds the lock. */
static simError_t stream_of(simStream_t h, struct simStream **out) {
  int d = tls_device;
  if (h == NULL || h == simStreamLegacy) {
    if (!rt.devs[d].legacy) {
      simError_t e = new_stream(d, simStreamDefault, 1, 0, &rt.devs[d].legacy);
      if (e)
        return e;
    }
    *out = rt.devs[d].legacy;
    return simSuccess;
  }
  if (h == simStreamPerThread) {
    if (!tls_per_thread[d]) {
      pthread_once(&per_thread_once, make_key);
      simError_t e = new_stream(d, simStreamDefault, 0, 1, &tls_per_thread[d]);
      if (e)
        return e;
      pthread_setspecific(per_thread_key, (void *)1);
    }
    *out = tls_per_thread[d];
    return simSuccess;
  }
  for (struct simStream *s = rt.streams; s; s = s->next)
    if (s == h) {
      if (s->destroyed)
        return simErrorInvalidResourceHandle;
      *out = s;
      return simSuccess;
    }
  return simErrorInvalidResourceHandle;
}

static int blocking(const struct simStream *s) {
  return !s->legacy && !(s->flags & simStreamNonBlocking);
}

static void append(struct simStream *s, op *o) {
  o->next = NULL;
  if (s->tail)
    s->tail->next = o;
  else
    s->head = o;
  s->tail = o;
  s->submitted++;
  pthread_cond_signal(&s->work);
}

static op *wait_stream_op(struct simStream *on) {
  op *w = calloc(1, sizeof *w);
  if (w) {
    w->kind = OP_WAIT_STREAM;
    w->stream = on;
    w->target = on->submitted;
  }
  return w;
}

/* Queues o on s after the implicit waits of the legacy default stream: work on the legacy
 * stream waits for all earlier work of the device's blocking streams, and work on a blocking
 * stream waits for earlier work on the legacy stream. Caller holds the lock. */
static simError_t enqueue(struct simStream *s, op *o) {
  if (s->legacy) {
    for (struct simStream *b = rt.streams; b; b = b->next)
      if (b->device == s->device && blocking(b) && b->done < b->submitted) {
        op *w = wait_stream_op(b);
        if (!w)
          return simErrorMemoryAllocation;
        append(s, w);
      }
  } else if (blocking(s)) {
    struct simStream *l = rt.devs[s->device].legacy;
    if (l && l->done < l->submitted) {
      op *w = wait_stream_op(l);
      if (!w)
        return simErrorMemoryAllocation;
      append(s, w);
    }
  }
  append(s, o);
  return simSuccess;
}

/* Queues a copy of o on s (with enqueue's implicit waits). Caller holds the lock. */
static simError_t submit(struct simStream *s, op o) {
  op *p = malloc(sizeof *p);
  if (!p)
    return simErrorMemoryAllocation;
  *p = o;
  simError_t e = enqueue(s, p);
  if (e)
    free(p);
  return e;
}

static void execute(struct simStream *s, op *o) {
  switch (o->kind) {
  case OP_COPY:
    memmove(o->dst, o->src, o->n);
    break;
  case OP_MEMSET:
    memset(o->dst, o->value, o->n);
    break;
  case OP_KERNEL:
    tls_kernel_device = s->device;
    o->fn(o->user);
    tls_kernel_device = -1;
    break;
  case OP_FREE: {
    pthread_mutex_lock(&rt.lock);
    device *dv = &rt.devs[o->device];
    size_t i = dv->ready ? block_at(dv, o->off) : 0;
    block *b = dv->ready ? &dv->blocks[i] : NULL;
    if (b && b->off == o->off && b->state == B_LIVE && b->gen != o->gen) {
      /* reused on this stream before the free ran: the poison lands in stream order, and
       * clobbers only work of the new owner that is not ordered after this stream */
      memset(dv->priv + b->off, FILL_FREED, b->size);
    } else if (b && b->off == o->off && b->state == B_FREEING && b->gen == o->gen) {
      memset(dv->priv + b->off, FILL_FREED, b->size); /* a late reader sees poison */
      if (b->pool)
        b->pool->used -= b->size;
      unsigned delay = stream_delay_us(s, 4 * rt.jitter_us);
      if (delay) {
        b->state = B_QUARANTINE; /* reused only after a random delay */
        b->release_ns = now_ns() + (uint64_t)delay * 1000u;
      } else {
        release_block(dv, i);
      }
    }
    rt.frees_pending--;
    pthread_mutex_unlock(&rt.lock);
    break;
  }
  case OP_RECORD:
    pthread_mutex_lock(&rt.lock);
    if (o->event->completed < o->target)
      o->event->completed = o->target;
    pthread_mutex_unlock(&rt.lock);
    break;
  case OP_WAIT_EVENT:
    pthread_mutex_lock(&rt.lock);
    while (o->event->completed < o->target)
      pthread_cond_wait(&rt.progress, &rt.lock);
    pthread_mutex_unlock(&rt.lock);
    break;
  case OP_WAIT_STREAM:
    pthread_mutex_lock(&rt.lock);
    while (o->stream->done < o->target)
      pthread_cond_wait(&rt.progress, &rt.lock);
    pthread_mutex_unlock(&rt.lock);
    break;
  }
}

static void *worker(void *arg) {
  struct simStream *s = arg;
  pthread_mutex_lock(&rt.lock);
  for (;;) {
    while (!s->head && !s->destroyed)
      pthread_cond_wait(&s->work, &rt.lock);
    if (!s->head)
      break; /* destroyed and drained */
    op *o = s->head;
    s->head = o->next;
    if (!s->head)
      s->tail = NULL;
    unsigned delay = o->kind == OP_WAIT_STREAM ? 0 : stream_delay_us(s, rt.jitter_us);
    pthread_mutex_unlock(&rt.lock);
    sleep_us(delay);
    execute(s, o);
    free(o);
    pthread_mutex_lock(&rt.lock);
    s->done++;
    pthread_cond_broadcast(&rt.progress);
  }
  pthread_mutex_unlock(&rt.lock);
  return NULL;
}

/* Host wait until s has done everything queued so far. Caller holds the lock. */
static void drain(struct simStream *s) {
  uint64_t target = s->submitted;
  while (s->done < target)
    pthread_cond_wait(&rt.progress, &rt.lock);
}

static void drain_device(int d) {
  uint64_t targets[256];
  struct simStream *list[256];
  size_t n = 0;
  for (struct simStream *s = rt.streams; s && n < 256; s = s->next)
    if (s->device == d) {
      list[n] = s;
      targets[n++] = s->submitted;
    }
  for (size_t i = 0; i < n; i++)
    while (list[i]->done < targets[i])
      pthread_cond_wait(&rt.progress, &rt.lock);
}

/* ------------------------------------------------------------------ the API */

simError_t simRuntimeGetVersion(int *v) {
  *v = 1000;
  return simSuccess;
}

simError_t simGetDeviceCount(int *n) {
  INJECT("GetDeviceCount");
  pthread_mutex_lock(&rt.lock);
  *n = rt.ndevices;
  pthread_mutex_unlock(&rt.lock);
  return *n ? simSuccess : simErrorNoDevice;
}

static int valid_device(int d) { return d >= 0 && d < rt.ndevices; }

simError_t simGetDeviceProperties(simDeviceProp *p, int d) {
  INJECT("GetDeviceProperties");
  pthread_mutex_lock(&rt.lock);
  simError_t e = valid_device(d) ? simSuccess : simErrorInvalidDevice;
  if (!e) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "devmm simulated device %d", d);
    p->totalGlobalMem = rt.memory;
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simGetDevice(int *d) {
  *d = tls_device;
  return simSuccess;
}

simError_t simSetDevice(int d) {
  INJECT("SetDevice");
  pthread_mutex_lock(&rt.lock);
  simError_t e = valid_device(d) ? simSuccess : simErrorInvalidDevice;
  pthread_mutex_unlock(&rt.lock);
  if (!e)
    tls_device = d;
  return e;
}

simError_t simDeviceSynchronize(void) {
  INJECT("DeviceSynchronize");
  pthread_mutex_lock(&rt.lock);
  drain_device(tls_device);
  pthread_mutex_unlock(&rt.lock);
  return simSuccess;
}

simError_t simMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
  INJECT("MemGetInfo");
  pthread_mutex_lock(&rt.lock);
  simError_t e = device_ready(tls_device);
  if (!e) {
    device *dv = &rt.devs[tls_device];
    size_t f = 0;
    for (size_t i = 0; i < dv->nblocks; i++)
      if (dv->blocks[i].state == B_FREE || dv->blocks[i].state == B_QUARANTINE)
        f += dv->blocks[i].size;
    *free_bytes = f;
    *total_bytes = dv->size;
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simMalloc(void **p, size_t n) {
  INJECT("Malloc");
  pthread_mutex_lock(&rt.lock);
  simError_t e = block_alloc(tls_device, n, NULL, NULL, p);
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simFree(void *p) {
  INJECT("Free");
  if (!p)
    return simSuccess;
  pthread_mutex_lock(&rt.lock);
  simError_t e = simSuccess;
  int d;
  if (live_block(p, &d)) {
    drain_device(d); /* a synchronous free waits for the device, as cudaFree does */
    block *b = live_block(p, &d);
    if (b) {
      device *dv = &rt.devs[d];
      memset(dv->priv + b->off, FILL_FREED, b->size);
      if (b->pool)
        b->pool->used -= b->size;
      release_block(dv, block_at(dv, b->off));
    }
  } else if (device_of(p) >= 0) {
    e = simErrorInvalidValue; /* not the start of a live allocation: a double free? */
  } else {
    e = drop_region(p, 1);
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simMallocManaged(void **p, size_t n, unsigned flags) {
  INJECT("MallocManaged");
  if (flags != simMemAttachGlobal)
    return simErrorInvalidValue;
  pthread_mutex_lock(&rt.lock);
  simError_t e = add_region(n, 1, p);
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simHostAlloc(void **p, size_t n, unsigned flags) {
  INJECT("HostAlloc");
  (void)flags;
  pthread_mutex_lock(&rt.lock);
  simError_t e = add_region(n, 0, p);
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simFreeHost(void *p) {
  INJECT("FreeHost");
  if (!p)
    return simSuccess;
  pthread_mutex_lock(&rt.lock);
  simError_t e = drop_region(p, 0);
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simMemAdvise(const void *p, size_t n, simMemoryAdvise advice, int d) {
  INJECT("MemAdvise");
  (void)advice;
  pthread_mutex_lock(&rt.lock);
  region *r = find_region(p, n);
  simError_t e = !r || !r->managed ? simErrorInvalidValue
                 : valid_device(d) ? simSuccess
                                   : simErrorInvalidDevice;
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simMemPrefetchAsync(const void *p, size_t n, int d, simStream_t h) {
  INJECT("MemPrefetchAsync");
  pthread_mutex_lock(&rt.lock);
  region *r = find_region(p, n);
  struct simStream *s;
  simError_t e = !r || !r->managed  ? simErrorInvalidValue
                 : !valid_device(d) ? simErrorInvalidDevice
                                    : stream_of(h, &s);
  pthread_mutex_unlock(&rt.lock);
  return e; /* managed memory is host memory here: there is nothing to move */
}

simError_t simDeviceGetDefaultMemPool(simMemPool_t *pool, int d) {
  INJECT("DeviceGetDefaultMemPool");
  pthread_mutex_lock(&rt.lock);
  simError_t e = valid_device(d) ? device_ready(d) : simErrorInvalidDevice;
  if (!e)
    *pool = &rt.devs[d].default_pool;
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simMemPoolCreate(simMemPool_t *pool, const simMemPoolProps *props) {
  INJECT("MemPoolCreate");
  if (!props || props->allocType != simMemAllocationTypePinned ||
      props->location.type != simMemLocationTypeDevice)
    return simErrorInvalidValue;
  pthread_mutex_lock(&rt.lock);
  simError_t e = valid_device(props->location.id) ? simSuccess : simErrorInvalidDevice;
  struct simMemPool *p = e ? NULL : calloc(1, sizeof *p);
  if (!e && !p)
    e = simErrorMemoryAllocation;
  if (!e) {
    p->device = props->location.id;
    p->max_size = props->maxSize;
    p->next = rt.pools;
    rt.pools = p;
    *pool = p;
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

/* A pool handle that exists and was not destroyed. Caller holds the lock. */
static int valid_pool(simMemPool_t pool) {
  if (!pool)
    return 0;
  for (int d = 0; d < SIM_MAX_DEVICES; d++)
    if (pool == &rt.devs[d].default_pool)
      return rt.devs[d].ready;
  for (struct simMemPool *p = rt.pools; p; p = p->next)
    if (p == pool)
      return !p->destroyed;
  return 0;
}

simError_t simMemPoolDestroy(simMemPool_t pool) {
  INJECT("MemPoolDestroy");
  pthread_mutex_lock(&rt.lock);
  simError_t e = valid_pool(pool) && !pool->is_default ? simSuccess : simErrorInvalidValue;
  if (!e)
    pool->destroyed = 1; /* allocations still out stay valid until freed, as in CUDA */
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simMemPoolSetAttribute(simMemPool_t pool, simMemPoolAttr attr, void *value) {
  INJECT("MemPoolSetAttribute");
  pthread_mutex_lock(&rt.lock);
  simError_t e = valid_pool(pool) && attr == simMemPoolAttrReleaseThreshold && value
                     ? simSuccess
                     : simErrorInvalidValue;
  if (!e)
    pool->release_threshold = *(uint64_t *)value;
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simMemPoolGetAttribute(simMemPool_t pool, simMemPoolAttr attr, void *value) {
  pthread_mutex_lock(&rt.lock);
  simError_t e = valid_pool(pool) && attr == simMemPoolAttrReleaseThreshold && value
                     ? simSuccess
                     : simErrorInvalidValue;
  if (!e)
    *(uint64_t *)value = pool->release_threshold;
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simMallocFromPoolAsync(void **p, size_t n, simMemPool_t pool, simStream_t h) {
  INJECT("MallocFromPoolAsync");
  pthread_mutex_lock(&rt.lock);
  struct simStream *s;
  simError_t e = valid_pool(pool) ? stream_of(h, &s) : simErrorInvalidValue;
  if (!e)
    e = block_alloc(pool->device, n, pool, s, p); /* usable by work queued on s from now on */
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simFreeAsync(void *p, simStream_t h) {
  INJECT("FreeAsync");
  if (!p)
    return simSuccess;
  pthread_mutex_lock(&rt.lock);
  struct simStream *s;
  int d;
  block *b = live_block(p, &d);
  simError_t e = b ? stream_of(h, &s) : simErrorInvalidValue;
  if (!e)
    e = submit(s, (op){.kind = OP_FREE, .device = d, .off = b->off, .gen = b->gen});
  if (!e) {
    b->state = B_FREEING; /* any further use of p is an error from now on */
    b->freeing_on = s;
    rt.frees_pending++;
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simMemcpyAsync(void *dst, const void *src, size_t n, int kind, simStream_t h) {
  INJECT("MemcpyAsync");
  if (kind != simMemcpyDefault)
    return simErrorInvalidValue;
  if (!n)
    return simSuccess;
  pthread_mutex_lock(&rt.lock);
  struct simStream *s;
  char *d_addr, *s_addr;
  int dd, sd;
  simError_t e = stream_of(h, &s);
  if (!e)
    e = resolve(dst, n, &d_addr, &dd);
  if (!e)
    e = resolve(src, n, &s_addr, &sd);
  if (!e) /* copies between devices are peer copies: allowed */
    e = submit(s, (op){.kind = OP_COPY, .dst = d_addr, .src = s_addr, .n = n});
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simMemsetAsync(void *dst, int value, size_t n, simStream_t h) {
  INJECT("MemsetAsync");
  if (!n)
    return simSuccess;
  pthread_mutex_lock(&rt.lock);
  struct simStream *s;
  char *addr;
  int d;
  simError_t e = stream_of(h, &s);
  if (!e)
    e = resolve(dst, n, &addr, &d);
  if (!e && d >= 0 && d != s->device)
    e = simErrorInvalidValue; /* another device's memory, from this device's stream */
  if (!e)
    e = submit(s, (op){.kind = OP_MEMSET, .dst = addr, .value = value, .n = n});
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simLaunchHostFunc(simStream_t h, void (*fn)(void *), void *user) {
  INJECT("LaunchHostFunc");
  if (!fn)
    return simErrorInvalidValue;
  pthread_mutex_lock(&rt.lock);
  struct simStream *s;
  simError_t e = stream_of(h, &s);
  if (!e)
    e = submit(s, (op){.kind = OP_KERNEL, .fn = fn, .user = user});
  pthread_mutex_unlock(&rt.lock);
  return e;
}

void *simDeviceView(const void *p, size_t n) {
  pthread_mutex_lock(&rt.lock);
  void *out = NULL;
  int d = device_of(p);
  if (d >= 0) {
    device *dv = &rt.devs[d];
    size_t off = (size_t)((const char *)p - dv->pub);
    if ((tls_kernel_device < 0 || tls_kernel_device == d) && off + n <= dv->size && off + n >= off)
      out = dv->priv + off;
  } else if (find_region(p, n)) {
    out = (void *)p;
  } else {
    import *im = find_import(p);
    size_t off = im ? (size_t)((const char *)p - im->ptr) : 0;
    if (im && (tls_kernel_device < 0 || tls_kernel_device == im->device) && off + n <= im->size &&
        off + n >= off)
      out = im->priv_map + (size_t)((const char *)p - im->pub_map);
  }
  pthread_mutex_unlock(&rt.lock);
  return out;
}

/* ------------------------------------------------------------------ IPC */

typedef struct {
  ipcfd_ref ref;
  uint64_t size;
  int32_t pid, device;
} ipc_payload;
_Static_assert(sizeof(ipc_payload) <= sizeof(simIpcMemHandle_t), "a sim IPC handle is 64 bytes");

static __thread char ipc_reason[256];

const char *simIpcReason(void) { return ipc_reason; }

/* The live block containing p (not only at its start), or NULL. Called under rt.lock. */
static block *containing_block(const void *p, int *dev) {
  int d = device_of(p);
  if (d < 0)
    return NULL;
  device *dv = &rt.devs[d];
  size_t off = (size_t)((const char *)p - dv->pub);
  block *b = &dv->blocks[block_at(dv, off)];
  if (b->state != B_LIVE || off < b->off || off - b->off >= b->size)
    return NULL;
  *dev = d;
  return b;
}

simError_t simMemGetAddressRange(void **base, size_t *size, void *p) {
  INJECT("MemGetAddressRange");
  pthread_mutex_lock(&rt.lock);
  int d;
  block *b = containing_block(p, &d);
  if (b) {
    if (base)
      *base = rt.devs[d].pub + b->off;
    if (size)
      *size = b->size;
  }
  pthread_mutex_unlock(&rt.lock);
  return b ? simSuccess : simErrorInvalidValue;
}

simError_t simIpcGetMemHandle(simIpcMemHandle_t *handle, void *p) {
  INJECT("IpcGetMemHandle");
  if (!handle)
    return simErrorInvalidValue;
  pthread_mutex_lock(&rt.lock);
  int d;
  /* as CUDA: an interior pointer gives the handle of the enclosing allocation (its base) */
  block *b = containing_block(p, &d);
  ipc_payload pl;
  memset(&pl, 0, sizeof pl);
  simError_t e = b ? simSuccess : simErrorInvalidValue;
  if (!e && ipcfd_describe(rt.devs[d].fd, b->off, &pl.ref) != 0)
    e = simErrorUnknown;
  if (!e) {
    pl.size = b->size;
    pl.pid = (int32_t)getpid();
    pl.device = d;
    memset(handle, 0, sizeof *handle);
    memcpy(handle->reserved, &pl, sizeof pl);
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simIpcOpenMemHandle(void **p, simIpcMemHandle_t handle, unsigned flags) {
  INJECT("IpcOpenMemHandle");
  (void)flags;
  ipc_reason[0] = '\0';
  if (!p)
    return simErrorInvalidValue;
  *p = NULL;
  ipc_payload pl;
  memcpy(&pl, handle.reserved, sizeof pl);
  pthread_mutex_lock(&rt.lock);
  int ok_device = valid_device(pl.device);
  pthread_mutex_unlock(&rt.lock);
  if (!ok_device) {
    snprintf(ipc_reason, sizeof ipc_reason, "the handle's device sim:%d does not exist here",
             (int)pl.device);
    return simErrorInvalidDevice;
  }
  int status;
  int fd = ipcfd_open(&pl.ref, pl.pid, pl.size, &status, ipc_reason, sizeof ipc_reason);
  if (fd < 0)
    return simErrorInvalidResourceHandle;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uint64_t start = pl.ref.offset / page * page;
  size_t len = (size_t)(pl.ref.offset - start + pl.size);
  char *pub = mmap(NULL, len, PROT_NONE, MAP_SHARED, fd, (off_t)start);
  char *priv = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)start);
  close(fd);
  pthread_mutex_lock(&rt.lock);
  simError_t e = simSuccess;
  if (pub == MAP_FAILED || priv == MAP_FAILED) {
    e = simErrorMemoryAllocation;
  } else if (rt.nimports == rt.icap) {
    size_t cap = rt.icap ? rt.icap * 2 : 8;
    import *g = realloc(rt.imports, cap * sizeof *g);
    if (g) {
      rt.imports = g;
      rt.icap = cap;
    } else {
      e = simErrorMemoryAllocation;
    }
  }
  if (!e) {
    char *at = pub + (pl.ref.offset - start);
    rt.imports[rt.nimports++] = (import){pub, priv, at, len, (size_t)pl.size, pl.device};
    *p = at;
  }
  pthread_mutex_unlock(&rt.lock);
  if (e) {
    if (pub != MAP_FAILED)
      munmap(pub, len);
    if (priv != MAP_FAILED)
      munmap(priv, len);
    snprintf(ipc_reason, sizeof ipc_reason, "cannot map %zu bytes", len);
  }
  return e;
}

simError_t simIpcCloseMemHandle(void *p) {
  INJECT("IpcCloseMemHandle");
  pthread_mutex_lock(&rt.lock);
  simError_t e = simErrorInvalidValue;
  for (size_t i = 0; i < rt.nimports; i++)
    if (rt.imports[i].ptr == p) {
import im = rt.imports[i];
      rt.imports[i] = rt.imports[--rt.nimports];
      munmap(im.pub_map, im.map_len);
      munmap(im.priv_map, im.map_len);
      e = simSuccess;
      break;
    }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simStreamCreateWithFlags(simStream_t *out, unsigned flags) {
  INJECT("StreamCreateWithFlags");
  if (flags & ~simStreamNonBlocking)
    return simErrorInvalidValue;
  pthread_mutex_lock(&rt.lock);
  simError_t e = new_stream(tls_device, flags, 0, 0, out);
  if (!e) {
    rt.streams_created++;
    rt.streams_live++;
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simStreamDestroy(simStream_t h) {
  INJECT("StreamDestroy");
  pthread_mutex_lock(&rt.lock);
  struct simStream *s = NULL;
  simError_t e = h == NULL || h == simStreamLegacy || h == simStreamPerThread
                     ? simErrorInvalidResourceHandle
                     : stream_of(h, &s);
  if (!e) {
    s->destroyed = 1; /* queued work still runs, then the worker exits */
    rt.streams_live--;
    pthread_cond_signal(&s->work);
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simStreamSynchronize(simStream_t h) {
  INJECT("StreamSynchronize");
  pthread_mutex_lock(&rt.lock);
  struct simStream *s;
  simError_t e = stream_of(h, &s);
  if (!e)
    drain(s);
  pthread_mutex_unlock(&rt.lock);
  return e;
}

/* An event handle that exists and was not destroyed. Caller holds the lock. */
static int valid_event(simEvent_t ev) {
  for (struct simEvent *x = rt.events; x; x = x->next)
    if (x == ev)
      return !x->destroyed;
  return 0;
}

simError_t simEventCreateWithFlags(simEvent_t *out, unsigned flags) {
  INJECT("EventCreateWithFlags");
  if (flags & ~simEventDisableTiming)
    return simErrorInvalidValue;
  pthread_mutex_lock(&rt.lock);
  struct simEvent *ev = calloc(1, sizeof *ev);
  simError_t e = ev ? simSuccess : simErrorMemoryAllocation;
  if (ev) {
    ev->device = tls_device;
    ev->next = rt.events;
    rt.events = ev;
    rt.events_created++;
    rt.events_live++;
    *out = ev;
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simEventRecord(simEvent_t ev, simStream_t h) {
  INJECT("EventRecord");
  pthread_mutex_lock(&rt.lock);
  struct simStream *s;
  simError_t e = valid_event(ev) ? stream_of(h, &s) : simErrorInvalidResourceHandle;
  if (!e && s->device != ev->device)
    e = simErrorInvalidResourceHandle; /* CUDA: the event and the stream must share a device */
  if (!e)
    e = submit(s, (op){.kind = OP_RECORD, .event = ev, .target = ev->recorded + 1});
  if (!e)
    ev->recorded++;
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simStreamWaitEvent(simStream_t h, simEvent_t ev, unsigned flags) {
  INJECT("StreamWaitEvent");
  if (flags)
    return simErrorInvalidValue;
  pthread_mutex_lock(&rt.lock);
  struct simStream *s;
  simError_t e = valid_event(ev) ? stream_of(h, &s) : simErrorInvalidResourceHandle;
  if (!e && ev->completed < ev->recorded) /* waits for the record made before this call */
    e = submit(s, (op){.kind = OP_WAIT_EVENT, .event = ev, .target = ev->recorded});
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simEventSynchronize(simEvent_t ev) {
  INJECT("EventSynchronize");
  pthread_mutex_lock(&rt.lock);
  simError_t e = valid_event(ev) ? simSuccess : simErrorInvalidResourceHandle;
  if (!e) {
    uint64_t target = ev->recorded;
    while (ev->completed < target)
      pthread_cond_wait(&rt.progress, &rt.lock);
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simEventDestroy(simEvent_t ev) {
  INJECT("EventDestroy");
  pthread_mutex_lock(&rt.lock);
  simError_t e = valid_event(ev) ? simSuccess : simErrorInvalidResourceHandle;
  if (!e) {
    ev->destroyed = 1; /* queued records and waits still complete */
    rt.events_live--;
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

/* ------------------------------------------------------------------ configuration, stats */

static int anything_live(void) {
  if (rt.streams_live || rt.frees_pending || rt.nregions)
    return 1;
  for (int d = 0; d < SIM_MAX_DEVICES; d++)
    for (size_t i = 0; rt.devs[d].ready && i < rt.devs[d].nblocks; i++)
      if (rt.devs[d].blocks[i].state == B_LIVE || rt.devs[d].blocks[i].state == B_FREEING)
        return 1;
  return 0;
}

simError_t simConfigure(int devices, size_t memory, unsigned jitter_us, uint64_t seed) {
  if (devices < 0 || devices > SIM_MAX_DEVICES || memory < SIM_ALIGN)
    return simErrorInvalidValue;
  memory = (memory + 4095) / 4096 * 4096;
  pthread_mutex_lock(&rt.lock);
  simError_t e = simSuccess;
  if (devices != rt.ndevices || memory != rt.memory) {
    if (anything_live()) {
      e = simErrorNotReady;
    } else {
      for (int d = 0; d < SIM_MAX_DEVICES; d++)
        device_teardown(d);
      rt.ndevices = devices;
      rt.memory = memory;
    }
  }
  if (!e) {
    rt.jitter_us = jitter_us;
    rt.seed = seed;
    rt.epoch++; /* streams re-seed their generators */
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

void sim__stats(uint64_t *streams_created, uint64_t *streams_live, uint64_t *events_created,
                uint64_t *events_live, uint64_t *allocations, uint64_t *bytes,
                uint64_t *frees_pending) {
  pthread_mutex_lock(&rt.lock);
  *streams_created = rt.streams_created;
  *streams_live = rt.streams_live;
  *events_created = rt.events_created;
  *events_live = rt.events_live;
  *frees_pending = rt.frees_pending;
  uint64_t n = rt.nregions, b = 0;
  for (size_t i = 0; i < rt.nregions; i++)
    b += rt.regions[i].size;
  for (int d = 0; d < SIM_MAX_DEVICES; d++)
    for (size_t i = 0; rt.devs[d].ready && i < rt.devs[d].nblocks; i++)
      if (rt.devs[d].blocks[i].state == B_LIVE || rt.devs[d].blocks[i].state == B_FREEING) {
        n++;
        b += rt.devs[d].blocks[i].size;
      }
  *allocations = n;
  *bytes = b;
  pthread_mutex_unlock(&rt.lock);
}

/* For the test entry's "on device d" calls: makes d the calling thread's device (*prev: the
 * one to restore), or says why not. */
static simError_t use_device(int d, int *prev) {
  pthread_mutex_lock(&rt.lock);
  simError_t e = valid_device(d) ? simSuccess : simErrorInvalidDevice;
  pthread_mutex_unlock(&rt.lock);
  *prev = tls_device;
  if (!e)
    tls_device = d;
  return e;
}

simError_t sim__device_synchronize(int d) {
  int prev;
  simError_t e = use_device(d, &prev);
  if (!e)
    e = simDeviceSynchronize();
  tls_device = prev;
  return e;
}

simError_t sim__stream_create(int d, unsigned flags, simStream_t *out) {
  int prev;
  simError_t e = use_device(d, &prev);
  if (!e)
    e = simStreamCreateWithFlags(out, flags);
  tls_device = prev;
  return e;
}

simError_t sim__event_create(int d, simEvent_t *out) {
  int prev;
  simError_t e = use_device(d, &prev);
  if (!e)
    e = simEventCreateWithFlags(out, simEventDisableTiming);
  tls_device = prev;
  return e;
}
