/* devmm-replay's parts: main.c (arguments, measuring each stack, the report), stacks.c
 * (building a stack from a kind or a devmm.ini), engine.c (the replay itself and the process's
 * memory figures). */
#ifndef DEVMM_REPLAY_H
#define DEVMM_REPLAY_H

#include <devmm/devmm.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define FAILED ((uintptr_t)1)

typedef struct {
  const char *spec; /* as given */
  int is_config;
} stack_spec;

/* stacks.c: the stack a spec names on dev (a kind, or a devmm.ini's device); non-zero with the
 * reason printed. */
int replay_build_stack(const stack_spec *s, devmm_device dev, devmm_resource **out);

enum { FP_AUTO, FP_RSS, FP_MEM_INFO, FP_NONE };

typedef struct replay {
  const devmm_log *log;
  devmm_resource *r;
  _Atomic uintptr_t *slot; /* per event: the replayed pointer of an allocation (0: not yet) */
  uint32_t **per_thread;   /* event indices of each logged thread */
  size_t *nper;
  int touch;    /* write one byte per page of every allocation */
  int mem_info; /* sample the device's used memory at each new peak of requested bytes */
  atomic_llong live, peak;
  atomic_size_t failures, failed_frees;
  atomic_size_t min_free;
  pthread_barrier_t start;
  long page;
} replay;

/* engine.c: one replay of the whole log with nthreads threads: its wall time in milliseconds. */
double replay_once(replay *rp, size_t nthreads);
/* engine.c: a field of /proc/self/status in KiB (-1 if unknown); resets the peak RSS (0 if it
 * could). */
long replay_status_kib(const char *key);
int replay_reset_peak_rss(void);

#endif
