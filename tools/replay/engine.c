/* devmm-replay's engine: each logged thread replayed by a thread of its own, in its order (see
 * main.c), and the process's memory figures read from /proc. */
#include "replay.h"

#include <malloc.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

long replay_status_kib(const char *key) {
  FILE *f = fopen("/proc/self/status", "re");
  char line[256];
  long v = -1;
  size_t k = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, key, k) == 0 && line[k] == ':') {
      v = strtol(line + k + 1, NULL, 10);
      break;
    }
  if (f)
    fclose(f);
  return v;
}

int replay_reset_peak_rss(void) {
  FILE *f = fopen("/proc/self/clear_refs", "we");
  if (!f)
    return -1;
  int ok = fputs("5", f) >= 0;
  return fclose(f) == 0 && ok ? 0 : -1;
}

static void note_peak(replay *rp, long long live) {
  long long cur = atomic_load_explicit(&rp->peak, memory_order_relaxed);
  while (live > cur)
    if (atomic_compare_exchange_weak(&rp->peak, &cur, live)) {
      if (rp->mem_info) {
        size_t f, t;
        if (devmm_mem_info(rp->r, &f, &t) == DEVMM_OK) {
          size_t m = atomic_load(&rp->min_free);
          while (f < m && !atomic_compare_exchange_weak(&rp->min_free, &m, f))
            ;
        }
      }
      break;
    }
}

static void do_event(replay *rp, size_t i) {
  const devmm_log_event *e = &rp->log->events[i];
  void *p = NULL;
  switch (e->action) {
  case DEVMM_LOG_ALLOCATE:
  case DEVMM_LOG_ALLOCATE_FAILURE:
    if (devmm_allocate(rp->r, e->bytes, 0, NULL, &p) != DEVMM_OK || (!p && e->bytes)) {
      atomic_fetch_add(&rp->failures, 1);
      atomic_store_explicit(&rp->slot[i], FAILED, memory_order_release);
      return;
    }
    if (rp->touch)
      for (size_t off = 0; off < e->bytes; off += (size_t)rp->page)
        ((volatile char *)p)[off] = 1;
    note_peak(rp, atomic_fetch_add(&rp->live, (long long)e->bytes) + (long long)e->bytes);
    if (e->action == DEVMM_LOG_ALLOCATE_FAILURE) { /* failed when recorded: never held */
      devmm_deallocate(rp->r, p, e->bytes, 0, NULL);
      atomic_fetch_sub(&rp->live, (long long)e->bytes);
      return;
    }
    atomic_store_explicit(&rp->slot[i], p ? (uintptr_t)p : FAILED, memory_order_release);
    return;
  case DEVMM_LOG_FREE: {
    if (e->peer < 0)
      return; /* allocated before the log began */
    uintptr_t v;
    while (!(v = atomic_load_explicit(&rp->slot[e->peer], memory_order_acquire)))
      sched_yield(); /* allocated by another thread that has not got there yet */
    if (v == FAILED)
      return;
    size_t bytes = rp->log->events[e->peer].bytes;
    if (devmm_deallocate(rp->r, (void *)v, bytes, 0, NULL) != DEVMM_OK)
      atomic_fetch_add(&rp->failed_frees, 1);
    atomic_fetch_sub(&rp->live, (long long)bytes);
    atomic_store_explicit(&rp->slot[e->peer], FAILED, memory_order_relaxed);
    return;
  }
  default: /* a free that failed when recorded: the allocation stayed */
    return;
  }
}

typedef struct {
  replay *rp;
  size_t t;
} worker;

static void *run_thread(void *arg) {
  worker *w = arg;
  replay *rp = w->rp;
  pthread_barrier_wait(&rp->start);
  const uint32_t *ev = rp->per_thread[w->t];
  for (size_t k = 0; k < rp->nper[w->t]; k++)
    do_event(rp, ev[k]);
  return NULL;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* One replay of the whole log; returns the wall time in ms, or -1 (message printed). */
double replay_once(replay *rp, size_t nthreads) {
  const devmm_log *log = rp->log;
  memset((void *)rp->slot, 0, log->nevents * sizeof *rp->slot);
  atomic_store(&rp->live, 0);
  atomic_store(&rp->peak, 0);
  atomic_store(&rp->failures, 0);
  atomic_store(&rp->failed_frees, 0);
  double t0, t1;
  if (nthreads == 1) {
    t0 = now_ms();
    for (size_t i = 0; i < log->nevents; i++)
      do_event(rp, i);
    t1 = now_ms();
  } else {
    pthread_t *th = calloc(nthreads, sizeof *th);
    worker *w = calloc(nthreads, sizeof *w);
    if (!th || !w || pthread_barrier_init(&rp->start, NULL, (unsigned)nthreads + 1)) {
      free(th), free(w);
      fprintf(stderr, "devmm-replay: out of memory starting %zu threads\n", nthreads);
      return -1;
    }
    size_t started = 0;
    for (; started < nthreads; started++) {
      w[started].rp = rp, w[started].t = started;
      if (pthread_create(&th[started], NULL, run_thread, &w[started]))
        break;
    }
    if (started < nthreads) { /* cannot happen on a sane system; do not hang the others */
      fprintf(stderr, "devmm-replay: cannot start thread %zu of %zu\n", started + 1, nthreads);
      exit(2);
    }
    t0 = now_ms();
    pthread_barrier_wait(&rp->start);
    for (size_t i = 0; i < nthreads; i++)
      pthread_join(th[i], NULL);
    t1 = now_ms();
    pthread_barrier_destroy(&rp->start);
    free(th), free(w);
  }
  /* the log's never-freed allocations: freed now, outside the timing */
  for (size_t i = 0; i < log->nevents; i++) {
    uintptr_t v = atomic_load(&rp->slot[i]);
    if (v && v != FAILED && log->events[i].action == DEVMM_LOG_ALLOCATE)
      devmm_deallocate(rp->r, (void *)v, log->events[i].bytes, 0, NULL);
  }
  return t1 - t0;
}
