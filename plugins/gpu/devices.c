/* The GPU plugin's devices: how many the runtime has (or why none), their names and sizes, a
 * failed runtime call as a devmm error, and making a resource's device current for a call. */
#include "gpu_internal.h"

#include <stdio.h>
#include <string.h>

#ifndef GPU_HAS_DRIVER_CHECK /* whether a failed device count means "no driver at all" */
static int gpu_driver_missing(gpuError_t e, char *why, size_t cap) {
  (void)e, (void)why, (void)cap;
  return 0;
}
#endif

/* ------------------------------------------------------------------ the process (ADR 38)
 * A device runtime does not survive fork (CUDA's rule: the child of a process that initialised
 * it gets "initialization error" from every call). The plugin notes its first runtime call; in a
 * child forked after it, no call reaches the runtime (whose locks a parent's thread may have held
 * at the fork) and every failure says why and what to do instead. A child of a parent that never
 * made a call uses the runtime normally. */

static int runtime_used, forked_after_use;

static void on_fork_child(void) {
  if (__atomic_load_n(&runtime_used, __ATOMIC_ACQUIRE))
    __atomic_store_n(&forked_after_use, 1, __ATOMIC_RELEASE);
}

void gpu_process_init(void) { pthread_atfork(NULL, NULL, on_fork_child); }

/* Called before each runtime call: 1 (and the call is not made) in a child forked after use. */
static int forked_child(void) {
  if (__atomic_load_n(&forked_after_use, __ATOMIC_ACQUIRE))
    return 1;
  if (!__atomic_load_n(&runtime_used, __ATOMIC_RELAXED))
    __atomic_store_n(&runtime_used, 1, __ATOMIC_RELEASE);
  return 0;
}

static int fork_error(const char *what) {
  return gpu_host->set_error(
      DEVMM_EDEVICE, /* not DEVMM_ESTATE: the deferred frees retry that (a graph capture) */
      "%s: this process was forked from one that had initialised the %s runtime, which does not "
      "survive fork (every call fails in the child, as CUDA's do); start worker processes with "
      "multiprocessing's 'spawn' or 'forkserver' start method "
      "(multiprocessing.get_context('spawn')), or fork before the first device use",
      what, GPU_PLUGIN);
}

int gpu_fail(gpuError_t e, const char *kind, int device, const char *call, size_t arg) {
  if (__atomic_load_n(&forked_after_use, __ATOMIC_ACQUIRE)) {
    char what[160];
    snprintf(what, sizeof what, "%s on %s:%d: %s(%zu)", kind, GPU_PLUGIN, device, call, arg);
    return fork_error(what);
  }
  /* CUDA's and HIP's stream-capture errors (900..908): "not now", which a deferred free retries
   * after the capture (ADR 38), as it does the plugin's own refusals */
  int capture = (int)e >= 900 && (int)e <= 908;
  int status = e == gpuErrorMemoryAllocation ? DEVMM_ENOMEM
               : capture                     ? DEVMM_ESTATE
                                             : DEVMM_EDEVICE;
  return gpu_host->set_error(status, "%s%s on %s:%d: %s(%zu) failed: %s (%s)",
                             status == DEVMM_ENOMEM ? "out of memory: " : "", kind, GPU_PLUGIN,
                             device, call, arg, gpuGetErrorString(e), gpuGetErrorName(e));
}

/* The device count, or an error saying why there is none (cached: it does not change; the
 * simulator's is configurable, so it asks every time). */
static int count_devices(int *n) {
  static int cached = -1;
  static gpuError_t why;
  if (forked_child()) {
    *n = 0;
    return fork_error("counting devices");
  }
  if (cached < 0 || GPU_DEVICE_COUNT_VARIES) {
    why = gpuGetDeviceCount(&cached);
    if (why != gpuSuccess)
      cached = 0;
  }
  *n = cached;
  if (why != gpuSuccess) {
    char driver[256];
    if (gpu_driver_missing(why, driver, sizeof driver))
      return gpu_host->set_error(DEVMM_EDEVICE, "%s", driver);
    /* HIP's string for some errors is their name: say it once (test-devmm-info.sh) */
    const char *text = gpuGetErrorString(why), *name = gpuGetErrorName(why);
    if (strcmp(text, name) == 0)
      return gpu_host->set_error(DEVMM_EDEVICE, "%s", name);
    return gpu_host->set_error(DEVMM_EDEVICE, "%s (%s)", text, name);
  }
  if (cached == 0)
    return gpu_host->set_error(DEVMM_EDEVICE, "no %s device is present", GPU_PLUGIN);
  return DEVMM_OK;
}

int gpu_count(size_t *count) {
  int n;
  int rc = count_devices(&n);
  *count = (size_t)n;
  return rc;
}

int gpu_device_info(size_t index, devmm_device_info *out) {
  gpuDeviceProp p;
  gpuError_t e = gpuGetDeviceProperties(&p, (int)index);
  if (e != gpuSuccess)
    return gpu_fail(e, GPU_PLUGIN, (int)index, GPU_PREFIX "GetDeviceProperties", index);
  out->device = (devmm_device){GPU_DEVICE_TYPE, (int32_t)index};
  if (p.major > 0)
    snprintf(out->name, sizeof out->name, "%.80s (compute capability %d.%d)", p.name, p.major,
             p.minor);
  else
    snprintf(out->name, sizeof out->name, "%.120s", p.name);
  out->total_bytes = p.totalGlobalMem;
  out->free_bytes = 0; /* asking would create a context on every device: see mem_info */
  return DEVMM_OK;
}

int gpu_check_device(const char *kind, int32_t id) {
  int n;
  if (count_devices(&n) != DEVMM_OK) {
    char why[256];
    snprintf(why, sizeof why, "%s", gpu_host->last_error());
    return gpu_host->set_error(DEVMM_EDEVICE, "%s: no %s device %d: 0 devices: %s", kind,
                               GPU_PLUGIN, (int)id, why);
  }
  if (id < 0 || id >= n)
    return gpu_host->set_error(DEVMM_EINVAL, "%s: no %s device %d (this machine has %d)", kind,
                               GPU_PLUGIN, (int)id, n);
  return DEVMM_OK;
}

#if GPU_HAS_CONTEXTS
/* The contexts gpu_enter replaced on this thread, innermost last: gpu_leave binds the caller's
 * own context again (one of cuCtxCreate's, or set with cuCtxSetCurrent), which restoring the
 * device with SetDevice would replace by that device's primary context (ADR 38). */
static __thread gpuCtx_t entered[8];
static __thread int nentered;
#endif

/* Makes `device` current for the calling thread; *prev is the device to restore (-1: none). */
gpuError_t gpu_enter(int device, int *prev) {
  int cur = -1;
  *prev = -1;
  if (forked_child())
    return GPU_ERROR_INITIALIZATION; /* gpu_fail says why */
  gpuError_t e = gpuGetDevice(&cur);
  if (e != gpuSuccess || cur == device)
    return e;
#if GPU_HAS_CONTEXTS
  gpuCtx_t ctx = gpu_ctx_current();
#endif
  if ((e = gpuSetDevice(device)) == gpuSuccess) {
    *prev = cur;
#if GPU_HAS_CONTEXTS
    if (nentered < 8)
      entered[nentered] = ctx;
    nentered++;
#endif
  }
  return e;
}

void gpu_leave(int prev) {
  if (prev < 0)
    return;
#if GPU_HAS_CONTEXTS
  nentered--;
  gpuCtx_t ctx = nentered >= 0 && nentered < 8 ? entered[nentered] : NULL;
  if (ctx && gpu_ctx_set(ctx) == gpuSuccess)
    return; /* the caller's context, whichever it was */
#endif
  gpuSetDevice(prev); /* back to the caller's device; nothing to report if it fails */
}
