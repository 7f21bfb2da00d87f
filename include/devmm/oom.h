/* devmm — out-of-memory reports: why an allocation failed, as figures.
 *
 * When an allocation fails with DEVMM_ENOMEM, devmm_allocate (the outermost call: adaptors call
 * their upstream's ops directly) completes the message with what was asked, on which device
 * through which stack, devmm's current and peak bytes there (from a statistics or limiting
 * adaptor in the stack), the device's free and total memory as the stack reports it, and, with a
 * tracking adaptor in the stack, the largest live allocations and where they came from. The same
 * figures are kept for the thread:
 *
 *   devmm_oom_report rep = {sizeof rep};
 *   if (devmm_allocate(r, n, 0, NULL, &p) == DEVMM_ENOMEM && devmm_last_oom(&rep) == DEVMM_OK)
 *     printf("%zu bytes asked, %lld in use\n", rep.requested_bytes, (long long)rep.current_bytes);
 */
#ifndef DEVMM_OOM_H
#define DEVMM_OOM_H

#include "export.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DEVMM_OOM_LARGEST 5

typedef struct devmm_oom_allocation {
  void *ptr;
  size_t bytes;
  uint64_t thread_id; /* devmm's id of the allocating thread, 0 if not recorded */
  char where[192];    /* the innermost recorded frame (Python stack or C backtrace), or "" */
} devmm_oom_allocation;

typedef struct devmm_oom_report {
  size_t struct_size; /* set by the caller: sizeof(devmm_oom_report) */
  devmm_device device;
  size_t requested_bytes, alignment;
  char stack[256];  /* the resource the request went to, e.g. "limiting(statistics(cpu.malloc))" */
  char reason[512]; /* what the layer that refused said */
  /* devmm's figures for the device in this stack; -1 when unknown */
  int64_t current_bytes, peak_bytes;
  char counted_by[256];            /* the adaptor they come from ("" if none) */
  int64_t free_bytes, total_bytes; /* the device as the stack reports it (mem_info); -1 unknown */
  char tracking[256];              /* the tracking adaptor ("" if none) */
  size_t live_count, live_bytes;   /* its live allocations */
  size_t nlargest;                 /* entries in largest, largest first */
  devmm_oom_allocation largest[DEVMM_OOM_LARGEST];
} devmm_oom_report;

/* The report of this thread's last error if that error was an allocation refused with
 * DEVMM_ENOMEM (copies min(out->struct_size, sizeof) bytes); DEVMM_ENOENT otherwise. */
DEVMM_API int devmm_last_oom(devmm_oom_report *out);

#ifdef __cplusplus
}
#endif
#endif
