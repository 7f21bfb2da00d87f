/* devmm — symbol visibility and common scalar types shared by every public header. */
#ifndef DEVMM_EXPORT_H
#define DEVMM_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#if defined(DEVMM_BUILDING_LIBRARY)
#define DEVMM_API __attribute__((visibility("default")))
#else
#define DEVMM_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* A device, laid out exactly like DLPack's DLDevice (device_type uses DLPack's codes). */
typedef struct devmm_device {
  int32_t device_type;
  int32_t device_id;
} devmm_device;

/* DLPack device type codes used by devmm. */
enum {
  DEVMM_DEVICE_CPU = 1,
  DEVMM_DEVICE_CUDA = 2,
  DEVMM_DEVICE_CUDA_HOST = 3,
  DEVMM_DEVICE_ROCM = 10,
  DEVMM_DEVICE_ROCM_HOST = 11,
  DEVMM_DEVICE_SIM = 12, /* DLPack's kDLExtDev: devmm's simulated accelerator (devmm-sim) */
  DEVMM_DEVICE_CUDA_MANAGED = 13,
  /* devmm's own codes, never DLPack's (its registry has none for these): the simulator's pinned
   * and managed memory, kept apart from CPU and sim memory as kDLCUDAHost and kDLCUDAManaged
   * are from CUDA's, so that code keyed on those kinds runs on the simulator. A consumer sees
   * them as they are (a device type it does not know), pinned memory asked for as (kDLCPU, 0)
   * as CPU memory: never as CUDA (ADR 37). */
  DEVMM_DEVICE_SIM_HOST = 1012,
  DEVMM_DEVICE_SIM_MANAGED = 1013,
};

/* An opaque stream handle (cudaStream_t / hipStream_t); NULL is the default stream. */
typedef void *devmm_stream;

#ifdef __cplusplus
}
#endif
#endif
