/* The GPU plugin's devices: how many the runtime has (or why none), their names and sizes, a
 * failed runtime call as a devmm error, and making a resource's device current for a call. */
#include "gpu_internal.h"

#include <stdio.h>

#ifndef GPU_HAS_DRIVER_CHECK /* whether a failed device count means "no driver at all" */
static int gpu_driver_missing(gpuError_t e, char *why, size_t cap) {
  (void)e, (void)why, (void)cap;
  return 0;
}
#endif

int gpu_fail(gpuError_t e, const char *kind, int device, const char *call, size_t arg) {
  int status = e == gpuErrorMemoryAllocation ? DEVMM_ENOMEM : DEVMM_EDEVICE;
  return gpu_host->set_error(status, "%s%s on %s:%d: %s(%zu) failed: %s (%s)",
                             status == DEVMM_ENOMEM ? "out of memory: " : "", kind, GPU_PLUGIN,
                             device, call, arg, gpuGetErrorString(e), gpuGetErrorName(e));
}

/* The device count, or an error saying why there is none (cached: it does not change; the
 * simulator's is configurable, so it asks every time). */
static int count_devices(int *n) {
  static int cached = -1;
  static gpuError_t why;
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
    return gpu_host->set_error(DEVMM_EDEVICE, "%s (%s)", gpuGetErrorString(why),
                               gpuGetErrorName(why));
  }
  if (cached == 0)
    return gpu_host->set_error(DEVMM_EDEVICE, "no %s device is present", GPU_PLUGIN);
  return DEVMM_OK;
}

int gpu_device_count(size_t *count) {
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

/* Makes `device` current for the calling thread; *prev is the device to restore (-1: none). */
gpuError_t gpu_enter(int device, int *prev) {
  int cur = -1;
  *prev = -1;
  gpuError_t e = gpuGetDevice(&cur);
  if (e != gpuSuccess || cur == device)
    return e;
  if ((e = gpuSetDevice(device)) == gpuSuccess)
    *prev = cur;
  return e;
}

void gpu_leave(int prev) {
  if (prev >= 0)
    gpuSetDevice(prev); /* back to the caller's device; nothing to report if it fails */
}
