/* libFuzzer target: the memory-log reader (devmm_log_parse). A log that parses must be paired
 * consistently: an allocation and its free point at each other, name the same address, and the
 * free comes later; the counts of unmatched frees, double frees (peer -2) and never-freed
 * allocations agree; no time is
 * more than 12 hours before the latest one so far (a bigger jump back is a midnight, so a time
 * that wrapped past 64 bits would show as one). */
#include <devmm/devmm.h>

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  devmm_log *log;
  int rc = devmm_log_parse((const char *)data, size, "fuzz.csv", &log);
  if (rc != DEVMM_OK) {
    if (rc != DEVMM_EINVAL && rc != DEVMM_ENOMEM)
      abort();
    return 0;
  }
  size_t open = 0, unmatched = 0, twice = 0;
  uint64_t latest = 0, half_day = 43200ull * 1000000000ull;
  for (size_t i = 0; i < log->nevents; i++) {
    const devmm_log_event *e = &log->events[i];
    if (e->thread >= log->nthreads || e->action > DEVMM_LOG_FREE_FAILURE)
      abort();
    if (latest > half_day && e->time_ns < latest - half_day)
      abort();
    if (e->time_ns > latest)
      latest = e->time_ns;
    if (e->peer == -2) { /* a free of an address whose allocations were all freed */
      if (e->action != DEVMM_LOG_FREE)
        abort();
      twice++;
      continue;
    }
    if (e->peer < 0) {
      open += e->action == DEVMM_LOG_ALLOCATE;
      unmatched += e->action == DEVMM_LOG_FREE;
      continue;
    }
    if ((size_t)e->peer >= log->nevents)
      abort();
    const devmm_log_event *p = &log->events[e->peer];
    if (p->peer != (int64_t)i || p->ptr != e->ptr)
      abort();
    if (e->action == DEVMM_LOG_ALLOCATE
            ? (p->action != DEVMM_LOG_FREE || e->peer <= (int64_t)i)
            : (p->action != DEVMM_LOG_ALLOCATE || e->peer >= (int64_t)i))
      abort();
  }
  if (open != log->never_freed || unmatched != log->unmatched_frees || twice != log->double_frees)
    abort();
  devmm_log_free(log);
  return 0;
}
