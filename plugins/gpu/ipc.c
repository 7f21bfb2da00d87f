/* The GPU plugin's IPC (ADR 30): <gpu>.device shares its allocations through the runtime's IPC
 * handles (the handle names the allocation's base, the payload the offset of the shared range in
 * it); <gpu>.async with pool = own and ipc = true through a shareable pool (GPU_HAS_POOL_IPC:
 * no backend has it yet, ADR 33); the other kinds, and runtimes without IPC, answer
 * DEVMM_ENOTSUP saying so. */
#include "gpu_internal.h"

#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "../common/ipc_fd.h"

enum { IPC_RUNTIME = 1, IPC_POOL = 2 };
typedef struct {
  uint32_t tag; /* IPC_RUNTIME: data is a runtime IPC handle; IPC_POOL: a pool's export data */
  int32_t device;
  uint64_t offset; /* IPC_RUNTIME: of the shared range in its allocation (the runtime maps the
                      allocation's base, whatever pointer inside it was exported) */
  ipcfd_ref pool;  /* IPC_POOL: the exporter's pool descriptor */
  unsigned char data[64];
} gpu_ipc_payload;
_Static_assert(sizeof(gpu_ipc_payload) <= DEVMM_IPC_PAYLOAD_SIZE, "the payload fits a handle");

static int ipc_unsupported(const gpu_res *r) {
  const char *kind = gpu_kind_names[r->kind];
  if (!GPU_HAS_IPC)
    return gpu_host->set_error(
        DEVMM_ENOTSUP,
        "%s: sharing memory with other processes is not implemented for this "
        "runtime (%s: its IPC calls are not loaded)",
        kind, GPU_PLUGIN);
  return gpu_host->set_error(
      DEVMM_ENOTSUP, "%s memory cannot be shared with other processes: %s.device can%s", kind,
      GPU_PLUGIN, GPU_HAS_POOL_IPC ? ", and .async with pool = own and ipc = true" : "");
}

static int g_ipc_get_handle(devmm_resource *self, void *ptr, size_t bytes, unsigned char *payload) {
  gpu_res *r = gpu_host->resource_context(self);
  gpu_ipc_payload pl;
  memset(&pl, 0, sizeof pl);
  pl.device = r->device;
#if GPU_HAS_IPC
  const char *kind = gpu_kind_names[r->kind];
  if (r->kind == KIND_DEVICE) {
    int prev;
    GPU_ENTER(r, prev);
    void *base = NULL;
    size_t size = 0;
    e = gpu_address_range(&base, &size, ptr);
    if (e != gpuSuccess) {
      gpu_leave(prev);
      return gpu_host->set_error(DEVMM_EINVAL, "%s: %p is not inside a live %s allocation (%s)",
                                 kind, ptr, kind, gpuGetErrorString(e));
    }
    size_t off = (size_t)((char *)ptr - (char *)base);
    if (bytes > size - off) {
      gpu_leave(prev);
      return gpu_host->set_error(DEVMM_EINVAL,
                                 "%s: [%p, +%zu) runs past its allocation of %zu bytes at %p", kind,
                                 ptr, bytes, size, base);
    }
    gpuIpcMemHandle_t h;
    e = gpuIpcGetMemHandle(&h, base);
    gpu_leave(prev);
    if (e != gpuSuccess)
      return gpu_fail(e, kind, r->device, GPU_PREFIX "IpcGetMemHandle", bytes);
    pl.tag = IPC_RUNTIME;
    pl.offset = off;
    memcpy(pl.data, &h, sizeof h < sizeof pl.data ? sizeof h : sizeof pl.data);
    memcpy(payload, &pl, sizeof pl);
    return DEVMM_OK;
  }
#if GPU_HAS_POOL_IPC
  if (r->kind == KIND_ASYNC && r->ipc) {
    int prev;
    GPU_ENTER(r, prev);
    gpuMemPoolPtrExportData d;
    e = gpuMemPoolExportPointer(&d, ptr);
    gpu_leave(prev);
    if (e != gpuSuccess)
      return gpu_fail(e, kind, r->device, GPU_PREFIX "MemPoolExportPointer", bytes);
    if (ipcfd_describe(r->pool_fd, 0, &pl.pool) != 0)
      return gpu_host->set_error(DEVMM_EIO, "%s: the pool's descriptor %d is gone", kind,
                                 r->pool_fd);
    pl.tag = IPC_POOL;
    memcpy(pl.data, &d, sizeof d < sizeof pl.data ? sizeof d : sizeof pl.data);
    memcpy(payload, &pl, sizeof pl);
    return DEVMM_OK;
  }
#endif
#endif
  (void)ptr, (void)bytes, (void)payload;
  return ipc_unsupported(r);
}

static int g_ipc_open(devmm_resource *self, const unsigned char *payload, size_t bytes, int32_t pid,
                      void **out, void **token) {
  gpu_res *r = gpu_host->resource_context(self);
  gpu_ipc_payload pl;
  memcpy(&pl, payload, sizeof pl);
  *token = NULL;
#if GPU_HAS_IPC
  const char *kind = gpu_kind_names[r->kind];
  if (pl.device != r->device)
    return gpu_host->set_error(DEVMM_EINVAL, "%s on %s:%d cannot open a handle of %s:%d memory",
                               kind, GPU_PLUGIN, r->device, GPU_PLUGIN, (int)pl.device);
  if (pl.tag == IPC_RUNTIME && r->kind == KIND_DEVICE) {
    int prev;
    GPU_ENTER(r, prev);
    gpuIpcMemHandle_t h;
    memcpy(&h, pl.data, sizeof h < sizeof pl.data ? sizeof h : sizeof pl.data);
    void *base = NULL;
    e = gpuIpcOpenMemHandle(&base, h);
    gpu_leave(prev);
    if (e == gpuSuccess) {
      *token = base;                   /* what close unmaps */
      *out = (char *)base + pl.offset; /* the runtime mapped the allocation's base */
    }
    if (e != gpuSuccess) {
      const char *why = gpu_ipc_reason();
      return gpu_host->set_error(
          gpu_ipc_stale(e) ? DEVMM_ENOENT : DEVMM_EDEVICE,
          "%s on %s:%d: %sIpcOpenMemHandle(%zu bytes from process %d) failed: "
          "%s (%s)%s%s",
          kind, GPU_PLUGIN, r->device, GPU_PREFIX, bytes, (int)pid, gpuGetErrorString(e),
          gpuGetErrorName(e), *why ? ": " : "", why);
    }
    return DEVMM_OK;
  }
#if GPU_HAS_POOL_IPC
  if (pl.tag == IPC_POOL && r->kind == KIND_ASYNC) {
    char why[256];
    int status;
    int fd = ipcfd_open(&pl.pool, pid, 0, &status, why, sizeof why);
    if (fd < 0)
      return gpu_host->set_error(status, "%s: cannot open the exporter's pool: %s", kind, why);
    int prev;
    gpuError_t e = gpu_enter(r->device, &prev);
    gpuMemPool_t pool = NULL;
    const char *call = GPU_PREFIX "MemPoolImportFromShareableHandle";
    if (e == gpuSuccess)
      e = gpuMemPoolImportFromShareableHandle(&pool, (void *)(uintptr_t)fd,
                                              GPU_POOL_IPC_HANDLE_TYPE, 0);
    close(fd);
    if (e == gpuSuccess) {
      gpuMemPoolPtrExportData d;
      memcpy(&d, pl.data, sizeof d < sizeof pl.data ? sizeof d : sizeof pl.data);
      call = GPU_PREFIX "MemPoolImportPointer";
      e = gpuMemPoolImportPointer(out, pool, &d);
      if (e != gpuSuccess)
        gpuMemPoolDestroy(pool);
    }
    gpu_leave(prev);
    if (e != gpuSuccess)
      return gpu_fail(e, kind, r->device, call, bytes);
    *token = pool;
    return DEVMM_OK;
  }
#endif
  return gpu_host->set_error(DEVMM_EINVAL, "%s cannot open this handle (made by another %s kind)",
                             kind, GPU_PLUGIN);
#else
  (void)bytes, (void)pid, (void)out, (void)pl;
  return ipc_unsupported(r);
#endif
}

static int g_ipc_close(devmm_resource *self, void *ptr, size_t bytes, void *token) {
  gpu_res *r = gpu_host->resource_context(self);
#if GPU_HAS_IPC
  int prev;
  GPU_ENTER(r, prev);
  const char *call = GPU_PREFIX "IpcCloseMemHandle";
#if GPU_HAS_POOL_IPC
  if (r->kind == KIND_ASYNC) { /* an imported pool's pointer: freed, then the imported pool */
    call = GPU_PREFIX "Free";
    e = gpuFree(ptr);
    gpuMemPoolDestroy((gpuMemPool_t)token);
  } else
#endif
    e = gpuIpcCloseMemHandle(token); /* the base the runtime mapped */
  gpu_leave(prev);
  (void)ptr;
  return e == gpuSuccess ? DEVMM_OK : gpu_fail(e, gpu_kind_names[r->kind], r->device, call, bytes);
#else
  (void)ptr, (void)bytes, (void)token;
  return ipc_unsupported(r);
#endif
}

const devmm_resource_ipc_ops gpu_ipc_device = {
    .struct_size = sizeof(devmm_resource_ipc_ops),
    .kind = GPU_PLUGIN ".device",
    .get_handle = g_ipc_get_handle,
    .open = g_ipc_open,
    .close = g_ipc_close,
};

const devmm_resource_ipc_ops gpu_ipc_async = {
    .struct_size = sizeof(devmm_resource_ipc_ops),
    .kind = GPU_PLUGIN ".async",
    .get_handle = g_ipc_get_handle,
    .open = g_ipc_open,
    .close = g_ipc_close,
};
