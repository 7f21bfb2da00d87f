/* devmm — the logging adaptor's CSV (RMM's columns Thread,Time,Action,Pointer,Size,Stream) read
 * back, with each free paired to its allocation: what devmm-replay and the timeline consume.
 *
 *   devmm_log *log;
 *   if (devmm_log_read("run.csv", &log) != DEVMM_OK) fprintf(stderr, "%s\n", devmm_last_error());
 *   for (size_t i = 0; i < log->nevents; i++) ... log->events[i].bytes ...
 *   devmm_log_free(log);
 *
 * Pointers are reused: an address freed may come back from the next allocation, and with several
 * threads the log can even show the new allocation before the old free (each line is written
 * after its operation returned). Pairing is first-in first-out per address: a free belongs to the
 * oldest allocation of that address still open, which is the only order an allocator can
 * produce. */
#ifndef DEVMM_MEMLOG_H
#define DEVMM_MEMLOG_H

#include "export.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum devmm_log_action {
  DEVMM_LOG_ALLOCATE = 0,
  DEVMM_LOG_FREE = 1,
  DEVMM_LOG_ALLOCATE_FAILURE = 2, /* an allocation that failed (pointer NULL) */
  DEVMM_LOG_FREE_FAILURE = 3,     /* a free that failed: the allocation stays open */
} devmm_log_action;

typedef struct devmm_log_event {
  uint64_t
      time_ns; /* since midnight before the first line (times of day; midnight wraps add a day) */
  uint64_t ptr;
  uint64_t bytes;
  uint64_t stream;
  int64_t peer;    /* allocate: index of its free, -1 if never freed in the log; free: index of its
                      allocation, -1 if it was allocated before the log began, -2 if its address
                      was allocated in the log and freed already (a double free); else -1 */
  uint32_t thread; /* index into devmm_log.threads */
  uint32_t action; /* a devmm_log_action */
} devmm_log_event;

typedef struct devmm_log {
  size_t nevents;
  devmm_log_event *events; /* in the order of the file's lines */
  size_t nthreads;
  uint64_t *threads;      /* the logged thread ids, in order of first appearance */
  size_t unmatched_frees; /* frees of memory allocated before the log began */
  size_t never_freed;     /* allocations with no free in the log */
  /* Added in 0.1 (the struct only grows; devmm allocates it): */
  size_t double_frees;       /* frees of an address whose allocations were all freed (peer -2) */
  size_t resized_frees;      /* frees paired with an allocation of another size */
  size_t first_double_free;  /* the event index of the first double free (SIZE_MAX: none) */
  size_t first_resized_free; /* the event index of the first resized free (SIZE_MAX: none) */
  size_t double_free_line;   /* the file's line of the first double free (0: none) */
  size_t resized_free_line;  /* the file's line of the first resized free (0: none) */
} devmm_log;

/* Reads and pairs a log; DEVMM_EIO if the file cannot be read, DEVMM_EINVAL with "file:line: what
 * is wrong, expected what" for a malformed line. Free the result with devmm_log_free. */
DEVMM_API int devmm_log_read(const char *path, devmm_log **out);
/* Like devmm_log_read, from text in memory (name is used in messages). */
DEVMM_API int devmm_log_parse(const char *text, size_t len, const char *name, devmm_log **out);
/* Frees a log from devmm_log_read; NULL is ignored. */
DEVMM_API void devmm_log_free(devmm_log *log);

#ifdef __cplusplus
}
#endif
#endif
