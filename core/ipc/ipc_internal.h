/* core/ipc: sharing memory between processes (ADR 30, ADR 33): the buffer handle
 * (buffer_handle.c) and the tensor handle around it (tensor_handle.c). Uses core/tensor and the
 * layers below. */
#ifndef DEVMM_IPC_INTERNAL_H
#define DEVMM_IPC_INTERNAL_H

#include "../tensor/tensor_internal.h"

#endif
