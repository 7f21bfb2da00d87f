/* The simulated runtime's internals (simrt.h is its API), shared by its files:
 *   options.c  the one state (rt) with its defaults, simConfigure, the counters, the test
 *              entry's "on device d" calls
 *   errors.c   error names, fault injection (INJECT)
 *   memory.c   devices (a memfd each, seen through two mappings), blocks, managed and pinned
 *              regions, and what address the runtime uses for a range
 *   streams.c  streams: queues run by worker threads with seeded jitter, the legacy default
 *              stream's implicit waits, the stream API
 *   events.c   events and the event API
 *   api.c      the device, memory, pool, copy and kernel API
 *   ipc.c      device memory shared with other processes
 * One mutex (rt.lock) guards all bookkeeping; one condition variable (rt.progress) is broadcast
 * whenever any stream finishes an operation, and every wait (a stream waiting for an event or
 * another stream, the host synchronising) re-checks its condition under the lock. Streams,
 * events and pools are never freed: a destroyed one stays in its list, marked, so a later use is
 * detected instead of reading freed memory. "Caller holds the lock" below means rt.lock. */
#ifndef DEVMM_SIMRT_INTERNAL_H
#define DEVMM_SIMRT_INTERNAL_H

#include "simrt.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define SIM_MAX_DEVICES 16
#define SIM_ALIGN 256
#define FILL_NEW 0xCD
#define FILL_FREED 0xDD

/* ------------------------------------------------------------------ the state */

enum { B_FREE, B_LIVE, B_FREEING, B_QUARANTINE };

typedef struct sim_block {
  size_t off, size;
  int state;
  struct simMemPool *pool;
  uint64_t release_ns;          /* B_QUARANTINE: reusable from then on */
  struct simStream *freeing_on; /* B_FREEING: the stream its free is queued on */
  uint64_t gen;                 /* bumped each time the block is handed out */
} sim_block;

struct simMemPool {
  int device, is_default, destroyed;
  size_t used, max_size;
  uint64_t release_threshold;
  struct simMemPool *next;
};

typedef struct sim_device {
  int ready;
  int fd; /* the memfd, kept open for IPC handles */
  char *pub, *priv;
  size_t size;
  sim_block *blocks;
  size_t nblocks, cap;
  struct simStream *legacy;
  struct simMemPool default_pool;
} sim_device;

enum { OP_COPY, OP_MEMSET, OP_KERNEL, OP_FREE, OP_RECORD, OP_WAIT_EVENT, OP_WAIT_STREAM };

typedef struct sim_op {
  int kind;
  struct sim_op *next;
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
} sim_op;

struct simStream {
  int device;
  unsigned flags;
  int legacy, per_thread, destroyed;
  sim_op *head, *tail;
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

typedef struct sim_region {
  char *ptr;
  size_t size;
  int managed, device;
} sim_region;

/* Device memory of another process, opened from an IPC handle: [ptr, ptr + size) inside the
 * mappings pub_map (PROT_NONE) and priv_map (the runtime's view), map_len bytes each. */
typedef struct sim_import {
  char *pub_map, *priv_map, *ptr;
  size_t map_len, size;
  int device;
} sim_import;

typedef struct sim_injection {
  char call[40];
  int skip, error;
} sim_injection;

/* The runtime's one state (options.c, with its defaults). */
struct sim_runtime {
  pthread_mutex_t lock;
  pthread_cond_t progress;
  int ndevices;
  size_t memory;
  unsigned jitter_us;
  uint64_t seed, epoch;
  sim_device devs[SIM_MAX_DEVICES];
  sim_region *regions;
  size_t nregions, rcap;
  sim_import *imports;
  size_t nimports, icap;
  struct simStream *streams;
  struct simEvent *events;
  struct simMemPool *pools;
  uint64_t serial;
  sim_injection inj[8];
  int ninj;
  /* counters for devmm_sim_stats */
  uint64_t streams_created, streams_live, events_created, events_live, frees_pending;
};
extern struct sim_runtime rt;

extern __thread int tls_device;        /* the current device */
extern __thread int tls_kernel_device; /* the device of the kernel this worker runs (-1: none) */

/* Whether d is a configured device. Caller holds the lock. */
static inline int sim__valid_device(int d) { return d >= 0 && d < rt.ndevices; }

static inline uint64_t sim__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------ errors.c */

/* Called first by every injectable entry point: an armed injection for `call` fires here. */
simError_t sim__injected(const char *call);

#define INJECT(call)                                                                               \
  do {                                                                                             \
    simError_t inj_ = sim__injected(call);                                                         \
    if (inj_ != simSuccess)                                                                        \
      return inj_;                                                                                 \
  } while (0)

/* ------------------------------------------------------------------ memory.c (caller holds
 * the lock) */

/* Maps device d's memory on first use. */
simError_t sim__device_ready(int d);
/* Unmaps device d (simConfigure, with nothing live); its legacy stream stays. */
void sim__device_teardown(int d);
/* The device whose public range holds p, or -1. */
int sim__device_of(const void *p);
/* Index of the block of dv containing offset off. */
size_t sim__block_at(sim_device *dv, size_t off);
/* Block i of dv becomes free, merged with free neighbours. */
void sim__release_block(sim_device *dv, size_t i);
/* Allocates n bytes of device d for pool (NULL: simMalloc), ordered on stream s (NULL: none). */
simError_t sim__block_alloc(int d, size_t n, struct simMemPool *pool, struct simStream *s,
                            void **out);
/* The live block that starts exactly at p (device memory), or NULL. */
sim_block *sim__live_block(const void *p, int *dev);
/* The managed or pinned region holding all of [p, p+n), or NULL. */
sim_region *sim__find_region(const void *p, size_t n);
/* The IPC mapping holding p, or NULL. */
sim_import *sim__find_import(const void *p);
/* The address the runtime uses for [p, p+n) at enqueue time; *dev: its device, or -1. */
simError_t sim__resolve(const void *p, size_t n, char **addr, int *dev);
/* A managed (managed = 1) or pinned region of n bytes, filled with FILL_NEW. */
simError_t sim__add_region(size_t n, int managed, void **out);
/* Frees the region at p, if it is of that sort. */
simError_t sim__drop_region(void *p, int managed);

/* ------------------------------------------------------------------ streams.c (caller holds
 * the lock) */

/* The stream a handle names, for the calling thread (the default streams made on first use). */
simError_t sim__stream_of(simStream_t h, struct simStream **out);
/* Queues a copy of o on s, after the legacy default stream's implicit waits. */
simError_t sim__submit(struct simStream *s, sim_op o);
/* Host wait until every stream of device d has done what was queued so far. */
void sim__drain_device(int d);

/* ------------------------------------------------------------------ the test entry's calls
 * (test_entry.c; defined in errors.c and options.c) */

/* Arms a one-shot failure: the entry point `call` succeeds skip times, then fails once with
 * error (NULL: disarms all); 0, or -1 when 8 are armed or the name is too long. */
int sim__inject(const char *call, int skip, int error);
void sim__stats(uint64_t *streams_created, uint64_t *streams_live, uint64_t *events_created,
                uint64_t *events_live, uint64_t *allocations, uint64_t *bytes,
                uint64_t *frees_pending);
/* simDeviceSynchronize, simStreamCreateWithFlags, simEventCreateWithFlags on device d, leaving
 * the calling thread's device as it was. */
simError_t sim__device_synchronize(int d);
simError_t sim__stream_create(int d, unsigned flags, simStream_t *out);
simError_t sim__event_create(int d, simEvent_t *out);

#endif
