/* The GPU plugin at a graph capture's boundary (ADR 38). While a stream captures, CUDA forbids
 * calls that would synchronise with it (malloc, free, a device synchronize, the legacy stream):
 * made from a thread the capture covers, they fail and invalidate the capture. The plugin never
 * makes them while it knows of a capture; it refuses instead (DEVMM_ESTATE, saying why), so that
 * the deferred free (core/tensor/buffer.c) waits and retries, and a caller hears why.
 *
 * What it knows: CUDA has no process-wide "is anything capturing"; the plugin asks the legacy
 * stream of the current device (which answers cudaErrorStreamCaptureImplicit while a blocking
 * stream of the device captures) and every stream it was handed that it saw capturing, until
 * that stream stops. A capture on a non-blocking stream that devmm never saw is invisible. */
#include "gpu_internal.h"

#define SEEN_MAX 64

static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
static gpuStream_t seen[SEEN_MAX]; /* streams seen capturing, not yet seen stopping */
static int nseen;

static int is_legacy(devmm_stream s) {
#ifdef gpuStreamLegacy
  if (s == (devmm_stream)gpuStreamLegacy)
    return 1;
#endif
  return s == NULL;
}

int gpu_stream_capturing(devmm_stream stream) {
  if (is_legacy(stream) || stream == DEVMM_STREAM_ALL)
    return 0;
  gpuStream_t s = (gpuStream_t)stream;
  int capturing = gpu_capture_status(s) > 0;
  if (capturing) {
    pthread_mutex_lock(&seen_lock);
    int i = 0;
    while (i < nseen && seen[i] != s)
      i++;
    if (i == nseen && nseen < SEEN_MAX) {
      seen[nseen] = s;
      __atomic_store_n(&nseen, nseen + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&seen_lock);
  }
  return capturing;
}

/* 2 if a stream the plugin saw capturing still does (*which: it), else 0. */
static int seen_underway(gpuStream_t *which) {
  int found = 0;
  if (!__atomic_load_n(&nseen, __ATOMIC_ACQUIRE))
    return 0; /* the common case: no lock */
  pthread_mutex_lock(&seen_lock);
  for (int i = 0; i < nseen;)
    if (gpu_capture_status(seen[i]) > 0) {
      *which = seen[i++];
      found = 2;
    } else {
      seen[i] = seen[nseen - 1]; /* stopped, or gone */
      __atomic_store_n(&nseen, nseen - 1, __ATOMIC_RELEASE);
    }
  pthread_mutex_unlock(&seen_lock);
  return found;
}

/* 1: a blocking stream of the current device captures; 2: a stream the plugin saw capturing
 * still does (*which: it); 3: unknown (an earlier runtime error is pending, which the legacy
 * stream's answer would replace: the backend's gpu_capture_status fails closed); 0: no
 * capture the plugin can see. */
static int capture_underway(gpuStream_t *which) {
  int legacy = gpu_capture_status(NULL);
  return legacy > 0 ? 1 : legacy < 0 ? 3 : seen_underway(which);
}

static int refuse_inside(const gpu_res *r, devmm_stream stream, const char *what) {
  return gpu_host->set_error(
      DEVMM_ESTATE,
      "%s on %s:%d: %s refused inside a graph capture (stream %p captures): CUDA would "
      "invalidate the capture (StreamCaptureUnsupported); %s",
      gpu_kind_names[r->kind], GPU_PLUGIN, r->device, what, stream,
      r->kind == KIND_ASYNC || r->kind == KIND_DEVICE
          ? "allocate and free before or after the capture, or use " GPU_PLUGIN
            ".async on the capturing stream (a capture records stream-ordered allocations)"
          : "do it before or after the capture");
}

int gpu_capture_guard(const gpu_res *r, devmm_stream stream, const char *what, int use) {
  int legacy = is_legacy(stream) || stream == DEVMM_STREAM_ALL;
  if (use != GPU_CAP_UNSAFE && !legacy) {
    if (!gpu_stream_capturing(stream) || use == GPU_CAP_ORDERED)
      return DEVMM_OK; /* ordered on a stream: a capture records it */
    return refuse_inside(r, stream, what);
  }
  if (!legacy && gpu_stream_capturing(stream))
    return refuse_inside(r, stream, what);
  gpuStream_t on = NULL;
  /* stream-ordered on the legacy stream (devmm.empty's default): the legacy stream is asked
   * too, a question that invalidates nothing, since a blocking stream's capture (any mode)
   * makes the call itself invalidate it; so is everything else (test
   * test_legacy_stream_alloc_and_free_during_a_blocking_capture_are_refused_not_invalidating) */
  int why = capture_underway(&on);
  if (why == 1)
    return gpu_host->set_error(DEVMM_ESTATE,
                               "%s on %s:%d: %s refused while a blocking stream of the device "
                               "captures a graph: CUDA would invalidate the capture",
                               gpu_kind_names[r->kind], GPU_PLUGIN, r->device, what);
  if (why == 3)
    return gpu_host->set_error(DEVMM_ESTATE,
                               "%s on %s:%d: %s refused: an earlier %s error is pending, and "
                               "asking whether a graph capture is underway would replace it; "
                               "read it (" GPU_PREFIX "GetLastError) first",
                               gpu_kind_names[r->kind], GPU_PLUGIN, r->device, what, GPU_PLUGIN);
  if (why == 2)
    return gpu_host->set_error(DEVMM_ESTATE,
                               "%s on %s:%d: %s refused while stream %p captures a graph: CUDA "
                               "would invalidate the capture",
                               gpu_kind_names[r->kind], GPU_PLUGIN, r->device, what, (void *)on);
  return DEVMM_OK;
}

int gpu_capture_known(void) {
  gpuStream_t on;
  return capture_underway(&on) != 0;
}

int gpu_capture_plan_wait(const gpu_res *r, devmm_stream waiter, devmm_stream waitee, int *plan) {
  int ew = gpu_stream_capturing(waiter), ee = gpu_stream_capturing(waitee);
  *plan = GPU_WAIT_STREAM;
  if (ee && !ew)
    return gpu_host->set_error(
        DEVMM_ESTATE,
        "%s on %s:%d: stream %p cannot wait for stream %p, which captures a graph (its work "
        "runs when the graph is launched): use the memory on the capturing stream, or after the "
        "capture",
        gpu_kind_names[r->kind], GPU_PLUGIN, r->device, waiter, waitee);
  if (ew && ee)
    return DEVMM_OK; /* both in the capture: the wait is an edge of the graph */
  int lw = is_legacy(waiter), le = is_legacy(waitee);
  gpuStream_t on;
  int busy = ew || ((lw || le) && capture_underway(&on));
  if (le && busy) {
    if (!ew)
      return gpu_host->set_error(
          DEVMM_ESTATE,
          "%s on %s:%d: stream %p cannot wait for the legacy stream while a graph capture is "
          "underway (CUDA would invalidate it): wait after the capture",
          gpu_kind_names[r->kind], GPU_PLUGIN, r->device, waiter);
    /* a blocking waiter's capture makes the legacy stream unusable, and the graph's launch on
     * it orders after the legacy stream; a non-blocking one's does neither: the legacy
     * stream's work is waited for on the host, now (test
     * test_an_export_into_a_nonblocking_capture_waits_for_the_legacy_streams_work) */
    *plan = gpu_capture_status(NULL) != 0 ? GPU_WAIT_NONE : GPU_WAIT_HOST;
  } else if (ew || (lw && busy)) {
    *plan = GPU_WAIT_HOST; /* the waitee's work is done before the caller goes on */
  }
  return DEVMM_OK;
}
