/* The GPU plugins: one implementation, built three times — devmm-cuda against the CUDA runtime
 * (plugins/gpu/cuda/backend.h), devmm-rocm against HIP (plugins/gpu/rocm/backend.h) and
 * devmm-sim against the simulated runtime (plugins/gpu/sim/backend.h), whose tests therefore
 * exercise this source. Every call is a real runtime call; without a driver or device the plugin
 * still loads and reports "0 devices: <runtime's reason>", and creating a resource fails with
 * that reason.
 *
 *   <gpu>.device   cudaMalloc / hipMalloc (synchronous)
 *   <gpu>.async    cudaMallocFromPoolAsync on the device's default pool or a pool of its own
 *                  (options pool = default|own; release_threshold and max_pool_size need an
 *                  own pool: the default pool is shared by the whole process)
 *   <gpu>.managed  cudaMallocManaged (options advise = none|read_mostly|preferred_location|
 *                  accessed_by, prefetch = true|false)
 *   <gpu>.pinned   cudaHostAlloc / hipHostMalloc: page-locked host memory (DLPack CUDAHost)
 *   <gpu>.system   malloc'ed memory the device addresses (HMM, ATS), refused where the runtime's
 *                  PageableMemoryAccess attribute is 0 (options headroom, prefetch)
 * <gpu>.async with pool = <address> views a pool another library owns (never destroyed).
 * Copy, memset (async on the given stream), stream_wait (event record + wait) and synchronize
 * are offered by every kind (ops.c). IPC (ADR 30, ipc.c): <gpu>.device shares its allocations
 * through the runtime's IPC handles, <gpu>.async with pool = own and ipc = true through a
 * shareable pool (CUDA only); the other kinds, and ROCm, answer DEVMM_ENOTSUP saying so. Every
 * call runs with the resource's device current, so a NULL stream is always that device's default
 * stream, and a failed device switch is an error (devices.c). The kinds and their options:
 * kinds.c. This file is the plugin's entry and descriptor. */
#include "gpu_internal.h"

#include <stdio.h>

const devmm_host_services *gpu_host;

const char *const gpu_kind_names[] = {GPU_PLUGIN ".device", GPU_PLUGIN ".async",
                                      GPU_PLUGIN ".managed", GPU_PLUGIN ".pinned",
                                      GPU_PLUGIN ".system"};

static const devmm_resource_kind *const kinds[] = {
    &gpu_device_kind, &gpu_async_kind, &gpu_managed_kind, &gpu_pinned_kind, &gpu_system_kind};

static char version[64];

static const devmm_plugin descriptor = {
    .abi_major = DEVMM_PLUGIN_ABI_MAJOR,
    .abi_minor = DEVMM_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(devmm_plugin),
    .name = GPU_PLUGIN,
    .version = version,
    .description = GPU_DESCRIPTION,
    .device_count = gpu_device_count,
    .device_info = gpu_device_info,
    .nkinds = sizeof kinds / sizeof kinds[0],
    .kinds = kinds,
    .options = GPU_PLUGIN_OPTIONS,
    .configure = GPU_CONFIGURE,
    .lazy_device_type = GPU_DEVICE_TYPE, /* counting devices initialises the runtime (ADR 38) */
};

DEVMM_PLUGIN_EXPORT const devmm_plugin *devmm_plugin_entry(uint32_t major, uint32_t minor,
                                                           const devmm_host_services *h) {
  (void)minor;
  if (major != DEVMM_PLUGIN_ABI_MAJOR || !h || h->struct_size < sizeof(devmm_host_services))
    return NULL;
  gpu_host = h;
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, gpu_process_init);
  GPU_ON_ENTRY(h);
#if GPU_RUNTIME_VERSION_AT_FIRST_USE /* naming it loads the runtime: at the first count */
  snprintf(version, sizeof version, "1.0.0 (%s)", GPU_RUNTIME_NOT_LOADED);
#else
  char rt[48];
  snprintf(version, sizeof version, "1.0.0 (%s)", gpu_runtime_version(rt, sizeof rt));
#endif
  return &descriptor;
}

/* The descriptor's device_count: the host calls it under its state lock (never at load for this
 * plugin), which is also when readers read the version, so the version can be completed here. */
int gpu_device_count(size_t *count) {
#if GPU_RUNTIME_VERSION_AT_FIRST_USE
  char rt[48];
  snprintf(version, sizeof version, "1.0.0 (%s)", gpu_runtime_version(rt, sizeof rt));
#endif
  return gpu_count(count);
}
