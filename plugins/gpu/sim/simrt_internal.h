/* The simulated runtime's internals (simrt.h is its API), shared by its files:
 *   options.c  the one state (rt) with its defaults, simConfigure, the counters, the test
 *              entry's "on device d" calls
 *   errors.c   error names, fault injection (INJECT)
 *   process.c  the runtime in its process: initialisation, the fork rule, teardown at exit
 *   memory.c   devices (a memfd each, seen through two mappings), blocks, managed and pinned
 *              regions, and what address the runtime uses for a range
 *   streams.c  streams: queues run by worker threads with seeded jitter, the legacy default
 *              stream's implicit waits, the stream API
 *   events.c   events and the event API
 *   api.c      the device, memory, pool, copy and kernel API
 *   ipc.c      device memory shared with other processes
 *   capture.c  stream capture: who may make unsafe calls, the graphs captures record
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
#define SIM_CHUNK ((size_t)2 << 20) /* what an IPC import maps at least (ipc.c) */
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
  uint64_t export_tag;          /* B_LIVE: its IPC export's random tag (0: never exported) */
} sim_block;

struct simMemPool {
  int device, is_default, destroyed;
  int managed; /* the device's default managed pool: its memory is managed regions */
  size_t used, max_size;
  uint64_t release_threshold;
  uint32_t access; /* bit d: device d's work may reach its memory (its own device always) */
  struct simMemPool *next;
};

/* What an export records past the device's bytes, by offset / SIM_ALIGN (ipc.c, ADR 40): its
 * random tag (0: none) and its bytes. An importer maps what the record says, never what the
 * handle says. */
typedef struct sim_export_record {
  uint64_t tag, size;
} sim_export_record;

typedef struct sim_device {
  int ready;
  int fd; /* the memfd, kept open for IPC handles */
  char *pub, *priv;
  size_t size;
  sim_export_record *tags; /* the memfd past size: each exported block's record */
  size_t tags_len;
  sim_block *blocks;
  size_t nblocks, cap;
  struct simStream *legacy;
  struct simMemPool default_pool;
  struct simMemPool managed_pool; /* simMemGetDefaultMemPool(..., simMemAllocationTypeManaged) */
} sim_device;

/* One record of an event: a wait and a host synchronize hold the record made before their call
 * (as CUDA's cudaStreamWaitEvent captures the event's state), so a later record never releases
 * them. Freed when its last holder (the event, the queued record, the waits) lets go. */
typedef struct sim_record {
  int done, refs;
} sim_record;

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
  sim_record *record;        /* OP_RECORD, OP_WAIT_EVENT: the record it completes or waits for */
  void (*user_free)(void *); /* OP_KERNEL: frees user with the op (sim__op_free), if set */
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
  struct sim_capture *capture; /* the capture it takes part in (capture.c), or NULL */
};

struct simEvent {
  int device, destroyed;
  sim_record *last; /* the latest record (NULL: never recorded) */
  struct simEvent *next;
  uint64_t capture_id; /* last recorded inside this capture (capture.c); 0: outside any */
};

typedef struct sim_region {
  char *ptr;
  size_t size;
  int managed, device;
  int portable;            /* pinned with simHostAllocPortable: pinned for every device */
  struct simMemPool *pool; /* managed memory of a managed pool (freed stream-ordered) */
  int freeing;             /* its stream-ordered free is queued */
} sim_region;

/* Device memory of another process, opened from an IPC handle (ipc.c): the exported allocation
 * [ptr, ptr + size) inside its chunk's mappings pub_map (PROT_NONE) and priv_map (the runtime's
 * view), map_len bytes each; refs opens share it; *tag_word is the exporter's tag of the block,
 * which its free clears (then every use is a fault). */
typedef struct sim_import {
  char *pub_map, *priv_map, *ptr;
  size_t map_len, size;
  int device;
  unsigned refs;
  uint64_t ino, dev, off; /* what the handle named, to find a repeated open */
  uint64_t tag;
  int32_t pid;
  int faulted;   /* the fault was reported on stderr */
  void *tag_map; /* the page of the exporter's tags holding tag_word */
  size_t tag_map_len;
  volatile uint64_t *tag_word;
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
  uint32_t peer[SIM_MAX_DEVICES]; /* bit p of peer[d]: d enabled peer access to p (access.c) */
  sim_injection inj[8];
  int ninj;
  /* counters for devmm_sim_stats */
  uint64_t streams_created, streams_live, events_created, events_live, frees_pending;
  struct sim_capture *captures; /* the active captures (capture.c) */
  uint64_t capture_serial;
  int pageable_access; /* [plugin sim] pageable_access: HMM/ATS (access.c) */
  struct sim_advice {  /* preferred locations advised on pageable memory (access.c) */
    uintptr_t start, end;
    int location;
  } advice[64];
  size_t nadvice;
};
extern struct sim_runtime rt;

extern __thread int tls_device;         /* the current device */
extern __thread int tls_bound;          /* a context is bound to this thread (simCtxGetCurrent) */
extern __thread struct simCtx *tls_ctx; /* the bound one if not a primary context (access.c) */
extern __thread int tls_kernel_device;  /* the device of the kernel this worker runs (-1: none) */

/* Whether d is a configured device. Caller holds the lock. */
static inline int sim__valid_device(int d) { return d >= 0 && d < rt.ndevices; }

static inline uint64_t sim__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------ errors.c */

/* Called first by every injectable entry point: a sticky error (simErrorIllegalAddress and
 * CUDA's other sticky codes: every later call fails with it), else an asynchronous error not
 * yet reported (once), else an armed injection for `call` (a sticky code stays). */
simError_t sim__injected(const char *call);
/* Stream work (what: "Kernel") that faults when it runs, if an injection says so: the error is
 * then reported by the next call of any entry point (sticky codes by all). Takes the lock. */
simError_t sim__async_fault(const char *what);

/* ------------------------------------------------------------------ process.c: the runtime
 * in its process (initialisation, the fork rule, the teardown at exit) */

/* Called first by every entry point (INJECT does): initialises the runtime in this process on
 * the first call; simErrorInitializationError in a child forked after it was initialised. */
simError_t sim__enter(void);
/* Aborts with a message naming `what` if the runtime was torn down at exit. */
void sim__check_finalised(const char *what);
/* A host thread's wait for the device (`what`: "a stream synchronize", ...): one wait on
 * rt.progress, counted, so that the teardown at exit finds a thread still waiting (it aborts, as
 * the CUDA runtime's teardown crashes under a thread that still uses it). Caller holds the lock. */
void sim__host_wait(const char *what);
/* 1 in a child forked after the runtime was initialised. */
int sim__forked(void);
/* 0: not initialised in this process; 1: initialised; 2: a child forked after it was. */
int sim__runtime_state(void);

#define INJECT(call)                                                                               \
  do {                                                                                             \
    simError_t inj_ = sim__enter();                                                                \
    if (inj_ == simSuccess)                                                                        \
      inj_ = sim__injected(call);                                                                  \
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
/* A synchronize's trim, as CUDA's pools do at stream, event and device synchronization: every
 * pool of device d gives back to the device what it keeps above its release threshold. */
void sim__pool_trim(int d);
/* The live block that starts exactly at p (device memory), or NULL. */
sim_block *sim__live_block(const void *p, int *dev);
/* The managed or pinned region holding all of [p, p+n), or NULL. */
sim_region *sim__find_region(const void *p, size_t n);
/* The IPC mapping holding p (anywhere in its chunk), or NULL. */
sim_import *sim__find_import(const void *p);
/* simSuccess while the exporter has not freed what im maps; else simErrorIllegalAddress, said on
 * stderr once (ipc.c). */
simError_t sim__import_live(sim_import *im);
/* The exporter's side of a free: block b of dv is no longer exported (ipc.c). */
void sim__unexport(sim_device *dv, sim_block *b);
/* Bytes of the export tags past a device of `memory` bytes in its memfd. */
size_t sim__tags_len(size_t memory);
/* The address the runtime uses for [p, p+n) at enqueue time; *dev: its device, or -1. */
simError_t sim__resolve(const void *p, size_t n, char **addr, int *dev);
/* A managed (managed = 1) or pinned region of n bytes, filled with FILL_NEW. */
simError_t sim__add_region(size_t n, int managed, void **out);
/* Frees the region at p, if it is of that sort. */
simError_t sim__drop_region(void *p, int managed);

/* ------------------------------------------------------------------ access.c (caller holds
 * the lock) */

/* Whether work of device d (a memset, a kernel) may reach [p, p+n): simSuccess, else
 * simErrorInvalidValue (pageable host memory, another device's memory without access). */
simError_t sim__reachable(const void *p, size_t n, int d);
/* Whether [p, p+n) is pageable for device d's copies: host memory the runtime did not
 * allocate, or pinned memory that is not portable and was allocated for another device. */
int sim__pageable(const void *p, size_t n, int d);
/* Whether [p, p+n) is host memory the runtime did not allocate, and advice on it (access.c). */
int sim__unowned(const void *p, size_t n);
/* Runs the stream-ordered free of a managed pool's region at p (memory.c; lock held). */
void sim__free_pool_region(void *p);
void sim__advise_pageable(const void *p, size_t n, int location);

/* ------------------------------------------------------------------ events.c (caller holds
 * the lock) */

/* Drops one hold on a record (freed with the last). */
void sim__record_unref(sim_record *r);

/* ------------------------------------------------------------------ streams.c (caller holds
 * the lock) */

/* The stream a handle names, for the calling thread (the default streams made on first use). */
simError_t sim__stream_of(simStream_t h, struct simStream **out);
/* Queues a copy of o on s, after the legacy default stream's implicit waits. */
simError_t sim__submit(struct simStream *s, sim_op o);
/* Host wait until every stream of device d has done what was queued so far. */
void sim__drain_device(int d);
/* Frees an op (and its kernel's user data when it owns it). */
void sim__op_free(sim_op *o);
/* Queues kernel fn(user) on the stream h names; the op owns user (user_free frees it). Takes
 * the lock. */
simError_t sim__launch_owned(simStream_t h, void (*fn)(void *), void *user,
                             void (*user_free)(void *));

/* ------------------------------------------------------------------ capture.c (caller holds
 * the lock): stream capture (simrt.h) */

typedef struct sim_capture {
  int mode, device, invalidated;
  pthread_t thread; /* the thread that began it */
  uint64_t id;
  struct simStream *origin;
  sim_op *head, *tail; /* the graph being built */
  size_t nodes;
  struct sim_capture *next;
} sim_capture;

/* simSuccess if the calling thread may make an unsafe call now; else the error (`legacy`: the
 * use of device d's legacy stream: simErrorStreamCaptureImplicit, and only captures of d count;
 * else simErrorStreamCaptureUnsupported), having invalidated every capture that forbids it. */
simError_t sim__capture_check(int d, int legacy);
/* Takes o, queued on the capturing stream s, into its capture's graph (or frees it when the
 * capture was invalidated: simErrorStreamCaptureInvalidated). */
simError_t sim__capture_take(struct simStream *s, sim_op *o);
/* Invalidates the capture s takes part in; returns e. */
simError_t sim__capture_invalidate(struct simStream *s, simError_t e);
/* The active capture of that id, or NULL. */
sim_capture *sim__capture_by_id(uint64_t id);
/* The number of nodes of a graph (the test entry's). */
size_t sim__graph_nodes(simGraph_t g);

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
