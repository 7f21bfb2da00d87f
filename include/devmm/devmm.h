/* devmm — device memory manager: the umbrella header.
 *
 * One uniform interface for allocating and managing memory on CPU, CUDA and ROCm: resources
 * and adaptors, a per-device registry, a layout engine, buffers/tensors handed out as DLPack,
 * and allocator plugins configured in devmm.ini. */
#ifndef DEVMM_DEVMM_H
#define DEVMM_DEVMM_H

#include "adaptors.h"
#include "config.h"
#include "dlpack.h"
#include "ffi.h"
#include "dtype.h"
#include "error.h"
#include "export.h"
#include "ipc.h"
#include "layout.h"
#include "memlog.h"
#include "oom.h"
#include "plugin.h"
#include "registry.h"
#include "resource.h"
#include "size.h"
#include "tensor.h"
#include "text.h"
#include <devmm/version.h>

#endif
