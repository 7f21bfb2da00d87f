/* devmm — adaptors: resources over an upstream resource that add exactly one behaviour.
 * Each holds a reference to its upstream; forwards mem_info/copy/memset/stream_wait.
 *
 *   devmm_resource *stats;
 *   devmm_statistics_adaptor_create(upstream, &stats);
 *   ... devmm_allocate(stats, ...) ...
 *   devmm_statistics s; devmm_statistics_get(stats, &s);   // s.current_bytes, s.peak_bytes
 */
#ifndef DEVMM_ADAPTORS_H
#define DEVMM_ADAPTORS_H

#include "resource.h"
#include "text.h" /* devmm_string_free, for devmm_tracking_report */

#ifdef __cplusplus
extern "C" {
#endif

/* The adaptor type of r: "statistics", "limiting", "tracking", "logging", "aligned",
 * "failure_callback", "thread_safe" or "prefetch" (a static string); NULL when r is not an
 * adaptor. */
DEVMM_API const char *devmm_adaptor_kind(const devmm_resource *r);

/* ------------------------------------------------------------------ statistics */

typedef struct devmm_statistics {
  int64_t current_bytes, peak_bytes, total_bytes;
  int64_t current_count, peak_count, total_count;
} devmm_statistics;

/* Flags of devmm_statistics_adaptor_create_ex. */
enum {
  /* Per-thread counter shards: scales with threads; current and totals stay exact, the peak
   * is exact for one thread and a lower bound when several allocate at once. */
  DEVMM_STATISTICS_SHARDED = 1u << 0,
};

/* Counts bytes and allocations (current, peak, total) with lock-free atomics; all exact. */
DEVMM_API int devmm_statistics_adaptor_create(devmm_resource *upstream, devmm_resource **out);
/* Like devmm_statistics_adaptor_create, with DEVMM_STATISTICS_* flags. */
DEVMM_API int devmm_statistics_adaptor_create_ex(devmm_resource *upstream, unsigned flags,
                                                 devmm_resource **out);
/* The counters of the innermost scope (the whole life of the adaptor if no scope is pushed). */
DEVMM_API int devmm_statistics_get(devmm_resource *stats, devmm_statistics *out);
/* Starts a nested scope whose counters start at zero (like RMM's push_counters). */
DEVMM_API int devmm_statistics_push(devmm_resource *stats);
/* Ends the innermost scope, returns its counters and merges them into the outer one. */
DEVMM_API int devmm_statistics_pop(devmm_resource *stats, devmm_statistics *out);
/* Sets the peaks of the innermost scope to the current values. */
DEVMM_API int devmm_statistics_reset_peak(devmm_resource *stats);

/* ------------------------------------------------------------------ limiting */

/* Fails allocations that would take the adaptor's live bytes over limit (DEVMM_ENOMEM); scales
 * with threads, never over-commits, and may refuse for a moment, under concurrency, a request
 * that would have fit (exact with one thread: ADR 29). */
DEVMM_API int devmm_limiting_adaptor_create(devmm_resource *upstream, size_t limit,
                                            devmm_resource **out);
/* Bytes currently allocated through the adaptor and its limit. */
DEVMM_API int devmm_limiting_get(devmm_resource *lim, size_t *allocated, size_t *limit);

/* ------------------------------------------------------------------ tracking */

#define DEVMM_TRACKING_MAX_FRAMES 16

typedef struct devmm_allocation_info {
  void *ptr;
  size_t bytes;
  size_t alignment;
  devmm_stream stream;
  uint64_t thread_id; /* devmm's small id of the allocating thread (0 unless options record it) */
  int nframes;        /* backtrace frames captured (0 unless enabled); devmm's own are skipped */
  void *frames[DEVMM_TRACKING_MAX_FRAMES];
  uint64_t tag;     /* what the context hook returned for it (0: none) */
  uint64_t time_ns; /* when it was allocated (CLOCK_MONOTONIC; 0 unless options record it) */
} devmm_allocation_info;

/* Records every live allocation; capture_backtraces != 0 also records the caller's stack. */
DEVMM_API int devmm_tracking_adaptor_create(devmm_resource *upstream, int capture_backtraces,
                                            devmm_resource **out);

/* What a tracking adaptor records besides its live allocations. Any of backtraces, history or
 * a context hook also records each allocation's thread and time. */
typedef struct devmm_tracking_options {
  size_t struct_size; /* sizeof(devmm_tracking_options) */
  int backtraces;     /* record each allocation's C backtrace */
  size_t history;     /* keep the last `history` allocate/free events in a ring (0: none) */
  /* Optional context hook, how a front end records its own call stack (Python's): capture runs
   * on the allocating thread after each successful allocation, under no lock of this adaptor
   * (under those of adaptors above it), and returns a tag kept with the allocation (0: none);
   * describe writes a tag's text into buf (reports, out-of-memory messages) and returns its
   * length; release runs once when the adaptor is destroyed. None of them runs after
   * devmm_callbacks_disable. */
  uint64_t (*context_capture)(void *user, size_t bytes);
  size_t (*context_describe)(void *user, uint64_t tag, char *buf, size_t cap);
  void (*context_release)(void *user);
  void *context_user;
} devmm_tracking_options;

/* A tracking adaptor with options (NULL: none). */
DEVMM_API int devmm_tracking_adaptor_create_ex(devmm_resource *upstream,
                                               const devmm_tracking_options *options,
                                               devmm_resource **out);

/* One event of a tracking adaptor's history. */
typedef struct devmm_tracking_event {
  uint64_t time_ns; /* CLOCK_MONOTONIC */
  void *ptr;
  size_t bytes;
  devmm_stream stream;
  uint64_t thread_id; /* of the thread that allocated or freed */
  uint64_t tag;       /* the allocation's context tag */
  uint32_t action;    /* DEVMM_LOG_ALLOCATE or DEVMM_LOG_FREE (memlog.h) */
  uint32_t reserved_;
} devmm_tracking_event;

/* Copies up to cap recorded events, oldest first, into out (may be NULL with cap 0) and sets *n to
 * the number copied; *stored (optional) to the number held, *dropped (optional) to the events
 * that fell out of the ring so far, *now_ns (optional) to the current time on the events' clock.
 * DEVMM_ENOTSUP if the adaptor keeps no history. */
DEVMM_API int devmm_tracking_history(devmm_resource *tracking, devmm_tracking_event *out,
                                     size_t cap, size_t *n, size_t *stored, uint64_t *dropped,
                                     uint64_t *now_ns);
/* Names a code address (a backtrace frame) as "object(symbol+0xoff)" into buf, with dladdr. */
DEVMM_API int devmm_frame_describe(const void *pc, char *buf, size_t cap);
/* Writes the text of an allocation's context tag (see devmm_tracking_options) into buf; "" when
 * the adaptor has no describe hook or the tag is 0. */
DEVMM_API int devmm_tracking_describe(devmm_resource *tracking, uint64_t tag, char *buf,
                                      size_t cap);
/* Finds the live allocation containing addr (any byte inside it); DEVMM_ENOENT if none. One live
 * throughout the call is always found (the table is striped by address: ADR 29). */
DEVMM_API int devmm_tracking_lookup(devmm_resource *tracking, const void *addr,
                                    devmm_allocation_info *out);
/* Number and bytes of live allocations. */
DEVMM_API int devmm_tracking_outstanding(devmm_resource *tracking, size_t *count, size_t *bytes);
/* Calls fn for each live allocation in address order; stops early if fn returns non-zero. */
DEVMM_API int devmm_tracking_foreach(devmm_resource *tracking,
                                     int (*fn)(const devmm_allocation_info *, void *), void *user);
/* A human-readable report of live allocations; free it with devmm_string_free. */
DEVMM_API int devmm_tracking_report(devmm_resource *tracking, char **out);

/* ------------------------------------------------------------------ logging */

/* Logs every allocate/free as CSV (Thread,Time,Action,Pointer,Size,Stream; RMM's columns) to
 * path or, if path is NULL, to stderr. path is created 0600, or truncated if it is a regular
 * file of this user's with one name; a final symbolic link, another user's file, a FIFO or a
 * directory is refused (DEVMM_EIO); adaptors of a process naming one file share it. */
DEVMM_API int devmm_logging_adaptor_create(devmm_resource *upstream, const char *path,
                                           int auto_flush, devmm_resource **out);
/* Flushes the log. */
DEVMM_API int devmm_logging_flush(devmm_resource *logging);

/* ------------------------------------------------------------------ aligned */

/* Gives every allocation of at least threshold bytes an alignment of at least `alignment`,
 * over-allocating from upstreams that cannot align that far themselves. */
DEVMM_API int devmm_aligned_adaptor_create(devmm_resource *upstream, size_t alignment,
                                           size_t threshold, devmm_resource **out);

/* ------------------------------------------------------------------ failure callback */

/* Called when the upstream's allocation fails: return 1 (positive) to retry, 0 to fail with the
 * upstream's error, or a negative devmm_status, set with devmm_set_error, to fail with that
 * instead (the callback's own error). `attempt` counts from 0 for each allocation. */
typedef int (*devmm_failure_callback)(size_t bytes, int attempt, void *user);

/* Flags of devmm_failure_callback_adaptor_create_ex. */
enum {
  /* Call back on any failed allocation (RMM's failure_callback_resource_adaptor<bad_alloc>),
   * not only on DEVMM_ENOMEM; devmm_last_status() says which. */
  DEVMM_FAILURE_CALLBACK_ANY_ERROR = 1u << 0,
};

/* Calls callback on DEVMM_ENOMEM from upstream and retries while it asks to. */
DEVMM_API int devmm_failure_callback_adaptor_create(devmm_resource *upstream,
                                                    devmm_failure_callback cb, void *user,
                                                    devmm_resource **out);
/* Like devmm_failure_callback_adaptor_create, with DEVMM_FAILURE_CALLBACK_* flags. */
DEVMM_API int devmm_failure_callback_adaptor_create_ex(devmm_resource *upstream,
                                                       devmm_failure_callback cb, void *user,
                                                       unsigned flags, devmm_resource **out);

/* ------------------------------------------------------------------ thread-safe */

/* Serialises every operation on upstream with a mutex (for upstreams that are not thread-safe). */
DEVMM_API int devmm_thread_safe_adaptor_create(devmm_resource *upstream, devmm_resource **out);

/* ------------------------------------------------------------------ prefetch */

/* Prefetches each allocation to the device on its stream once upstream made it (RMM's
 * prefetch_resource_adaptor), through devmm_prefetch: over any stack whose leaf has the prefetch
 * op (<gpu>.managed, <gpu>.system, <gpu>.async with pool = managed), adaptors between them
 * included. DEVMM_ENOTSUP at creation where no layer has it; an allocation whose prefetch fails
 * is freed and the prefetch's error returned. */
DEVMM_API int devmm_prefetch_adaptor_create(devmm_resource *upstream, devmm_resource **out);

#ifdef __cplusplus
}
#endif
#endif
