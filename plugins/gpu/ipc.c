/* The GPU plugin's IPC (ADR 30): <gpu>.device shares its allocations through the runtime's IPC
 * handles (the handle names the allocation's base, the payload the offset of the shared range in
 * it); <gpu>.async with pool = own and ipc = true through a shareable pool (GPU_HAS_POOL_IPC:
 * no backend has it yet, ADR 33); the other kinds, and runtimes without IPC, answer
 * DEVMM_ENOTSUP saying so. At CUDA's boundaries (ADR 38 §Threads and contexts; IPC opens): every
 * call binds the device's context on the calling thread first; a handle opened in the process
 * that made it is the exporter's own memory (CUDA refuses to open it there); repeated opens in a
 * process share one mapping, closed at the last close; what was opened is checked against the
 * handle's offset and size (ADR 40); a failed open is stale when the runtime says the memory is
 * gone or the exporter has exited; an exporter's free of memory another process has open waits
 * for its last close (ipc_ledger.c). */
#include "gpu_internal.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
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
  uint64_t base, size;    /* IPC_RUNTIME: the allocation in the exporter (its own opens use them) */
  uint32_t ledger_gen;    /* IPC_RUNTIME: the generation of its ledger slot, which pool names */
  uint32_t ledger_layout; /* IPC_RUNTIME: the ledger's layout (ipc_ledger.c); 0: an older devmm's */
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

#if GPU_HAS_IPC
/* Makes the resource's device current and its context bound to the calling thread (a thread that
 * made no runtime call has none, and the driver-level calls need one: ADR 38). */
static gpuError_t ipc_enter(const gpu_res *r, int *prev) {
  gpuError_t e = gpu_enter(r->device, prev);
  if (e == gpuSuccess && *prev < 0 && !gpu_context_bound())
    e = gpuSetDevice(r->device);
  return e;
}

#define IPC_ENTER(r, prev)                                                                         \
  gpuError_t e = ipc_enter((r), &(prev));                                                          \
  if (e != gpuSuccess)                                                                             \
  return gpu_fail(e, gpu_kind_names[(r)->kind], (r)->device, GPU_PREFIX "SetDevice",               \
                  (size_t)(r)->device)

/* The runtime's mappings this process opened, one per handle, shared by repeated opens. */
typedef struct mapping {
  struct mapping *next;
  int device;
  unsigned char handle[sizeof(gpuIpcMemHandle_t)];
  void *base;
  size_t size; /* of what was opened, as the runtime reports it */
  unsigned refs;
  void *joined; /* the exporter's ledger slot this process counts in (ipc_ledger.c) */
} mapping;
static mapping *mappings; /* under mappings_lock */
static pthread_mutex_t mappings_lock = PTHREAD_MUTEX_INITIALIZER;
static char own_process; /* the token of a handle this process made: nothing to close */

/* Whether process pid has exited (a pid that is someone else's now still counts as live). */
static int exporter_gone(int32_t pid) { return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH; }

/* What a handle's offset and bytes say against a range of size bytes: DEVMM_OK, or the error. */
static int check_range(const char *kind, const gpu_ipc_payload *pl, size_t bytes, size_t size,
                       const char *what) {
  if (pl->offset <= size && bytes <= size - pl->offset)
    return DEVMM_OK;
  return gpu_host->set_error(DEVMM_EINVAL,
                             "%s: the IPC handle names bytes %llu..+%zu of %s of %zu bytes: it "
                             "runs past it (a forged or corrupted handle)",
                             kind, (unsigned long long)pl->offset, bytes, what, size);
}

/* A handle of this process: its own allocation, checked to be the one the handle names. */
static int open_own(gpu_res *r, const gpu_ipc_payload *pl, size_t bytes, void **out) {
  const char *kind = gpu_kind_names[r->kind];
  int prev;
  IPC_ENTER(r, prev);
  void *base = NULL;
  size_t size = 0;
  gpuIpcMemHandle_t h;
  memset(&h, 0, sizeof h);
  e = gpu_address_range(&base, &size, (void *)(uintptr_t)pl->base);
  if (e == gpuSuccess && base == (void *)(uintptr_t)pl->base)
    e = gpuIpcGetMemHandle(&h, base);
  gpu_leave(prev);
  if (e != gpuSuccess || base != (void *)(uintptr_t)pl->base ||
      memcmp(&h, pl->data, sizeof h < sizeof pl->data ? sizeof h : sizeof pl->data) != 0 ||
      gpu_ledger_freed(r->device, base)) /* freed, kept only for another process's mapping */
    return gpu_host->set_error(DEVMM_ENOENT,
                               "%s on %s:%d: the IPC handle was made by this process (%d), but "
                               "names none of its live allocations: its memory was freed (or "
                               "the handle comes from another pid namespace)",
                               kind, GPU_PLUGIN, r->device, (int)getpid());
  int rc = check_range(kind, pl, bytes, size, "its allocation");
  if (rc)
    return rc;
  *out = (char *)base + pl->offset;
  return DEVMM_OK;
}

/* Opens (or shares) the runtime's mapping of pl's handle, checked against its range: the mapping
 * in *m, or the error. */
static int open_mapping(gpu_res *r, const gpu_ipc_payload *pl, size_t bytes, int32_t pid,
                        mapping **m) {
  const char *kind = gpu_kind_names[r->kind];
  gpuIpcMemHandle_t h;
  memcpy(&h, pl->data, sizeof h < sizeof pl->data ? sizeof h : sizeof pl->data);
  pthread_mutex_lock(&mappings_lock);
  for (mapping *x = mappings; x; x = x->next)
    if (x->device == r->device && memcmp(x->handle, &h, sizeof h) == 0) {
      int rc = check_range(kind, pl, bytes, x->size, "the mapping opened");
      if (!rc) {
        x->refs++;
        *m = x;
      }
      pthread_mutex_unlock(&mappings_lock);
      return rc;
    }
  mapping *x = calloc(1, sizeof *x);
  if (!x) {
    pthread_mutex_unlock(&mappings_lock);
    return gpu_host->set_error(DEVMM_ENOMEM, "%s: out of host memory", kind);
  }
  int prev;
  gpuError_t e = ipc_enter(r, &prev);
  const char *call = GPU_PREFIX "SetDevice";
  if (e == gpuSuccess) {
    call = GPU_PREFIX "IpcOpenMemHandle";
    e = gpuIpcOpenMemHandle(&x->base, h);
  }
  void *base = NULL;
  gpuError_t range = gpuSuccess;
  if (e == gpuSuccess) /* what was opened, as the runtime sees it (cuMemGetAddressRange) */
    range = gpu_address_range(&base, &x->size, x->base);
  int rc = DEVMM_OK;
  if (e != gpuSuccess) {
    const char *why = gpu_ipc_reason();
    int stale = e != gpuSuccess && (gpu_ipc_stale(e) || exporter_gone(pid));
    rc = gpu_host->set_error(stale ? DEVMM_ENOENT : DEVMM_EDEVICE,
                             "%s on %s:%d: %s(%zu bytes from process %d) failed: %s (%s)%s%s%s",
                             kind, GPU_PLUGIN, r->device, call, bytes, (int)pid,
                             gpuGetErrorString(e), gpuGetErrorName(e), *why ? ": " : "", why,
                             stale ? " (the exporter has freed the memory or exited)" : "");
  } else if (range != gpuSuccess || (char *)base > (char *)x->base ||
             (size_t)((char *)x->base - (char *)base) >= x->size) {
    rc = gpu_host->set_error(DEVMM_EDEVICE,
                             "%s on %s:%d: the mapping opened at %p has no address range that "
                             "holds it (%s): cannot check the handle against it",
                             kind, GPU_PLUGIN, r->device, x->base, gpuGetErrorString(range));
  } else { /* the range may start before the pointer: a block the allocation shares */
    x->size -= (size_t)((char *)x->base - (char *)base);
    rc = check_range(kind, pl, bytes, x->size, "the mapping opened");
  }
  if (rc && e == gpuSuccess)
    gpuIpcCloseMemHandle(x->base);
  gpu_leave(prev);
  if (rc) {
    free(x);
  } else {
    x->device = r->device;
    memcpy(x->handle, &h, sizeof h);
    x->refs = 1;
    x->joined = gpu_ledger_join(&pl->pool, pid, pl->ledger_gen, pl->ledger_layout);
    x->next = mappings;
    mappings = x;
    *m = x;
  }
  pthread_mutex_unlock(&mappings_lock);
  return rc;
}

/* Whether p lies in a mapping this process opened from another process's handle. */
static int in_mapping(const void *p) {
  pthread_mutex_lock(&mappings_lock);
  const mapping *x = mappings;
  while (x && !((const char *)p >= (const char *)x->base &&
                (const char *)p < (const char *)x->base + x->size))
    x = x->next;
  pthread_mutex_unlock(&mappings_lock);
  return x != NULL;
}

/* One close of m: the runtime's mapping is closed at the last. */
static gpuError_t close_mapping(mapping *m) {
  pthread_mutex_lock(&mappings_lock);
  gpuError_t e = gpuSuccess;
  if (--m->refs == 0) {
    for (mapping **at = &mappings; *at; at = &(*at)->next)
      if (*at == m) {
        *at = m->next;
        break;
      }
    e = gpuIpcCloseMemHandle(m->base);
    gpu_ledger_leave(m->joined); /* unmapped: the exporter may free it now */
    free(m);
  }
  pthread_mutex_unlock(&mappings_lock);
  return e;
}
#endif

static int g_ipc_get_handle(devmm_resource *self, void *ptr, size_t bytes, unsigned char *payload) {
  gpu_res *r = gpu_host->resource_context(self);
  gpu_ipc_payload pl;
  memset(&pl, 0, sizeof pl);
  pl.device = r->device;
#if GPU_HAS_IPC
  const char *kind = gpu_kind_names[r->kind];
  if (r->kind == KIND_DEVICE) {
    if (in_mapping(ptr))
      return gpu_host->set_error(DEVMM_ENOTSUP,
                                 "%s: %p is memory this process opened from another process's "
                                 "IPC handle: the runtime cannot export it again (CUDA exports "
                                 "only what its process allocated); send it from its exporter, "
                                 "or a copy",
                                 kind, ptr);
    int prev;
    IPC_ENTER(r, prev);
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
    pl.base = (uint64_t)(uintptr_t)base;
    pl.size = size;
    /* none: no deferred free */
    gpu_ledger_export(r->device, base, &pl.pool, &pl.ledger_gen, &pl.ledger_layout);
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
    /* the handle's own word first (ADR 40); the mapping opened is the authority, below */
    int rc = check_range(kind, &pl, bytes, (size_t)pl.size, "the allocation it names");
    if (rc)
      return rc;
    if (pl.pool.ino && pl.ledger_layout > GPU_LEDGER_LAYOUT) /* ADR 44 */
      return gpu_host->set_error(DEVMM_EINVAL,
                                 "%s: the IPC handle's ledger has layout %u, this devmm knows "
                                 "layouts 0..%d: it was made by a newer devmm (use the same "
                                 "devmm on both sides)",
                                 kind, (unsigned)pl.ledger_layout, GPU_LEDGER_LAYOUT);
    if (pid == (int32_t)getpid()) { /* CUDA opens nothing in the exporter: its own memory */
      rc = open_own(r, &pl, bytes, out);
      if (!rc)
        *token = &own_process;
      return rc;
    }
    mapping *m = NULL;
    if ((rc = open_mapping(r, &pl, bytes, pid, &m)) != DEVMM_OK)
      return rc;
    *token = m;
    *out = (char *)m->base + pl.offset; /* the runtime mapped the allocation's base */
    return DEVMM_OK;
  }
#if GPU_HAS_POOL_IPC
  if (pl.tag == IPC_POOL && r->kind == KIND_ASYNC) {
    char why[256];
    int status;
    /* the runtime's pool descriptor: devmm names none of its own (cuda.async cannot run here) */
    static const ipcfd_expect pool = {IPCFD_NAME_POOL, "memory pool", NULL};
    int fd = ipcfd_open(&pl.pool, pid, 0, &pool, &status, why, sizeof why);
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
    /* the header's bytes against the allocation imported, as the runtime-handle path checks
     * them (ADR 40; not exercised here: the simulator has no shareable pools) */
    void *base = NULL;
    size_t size = 0;
    int rc = DEVMM_OK;
    if (e == gpuSuccess) {
      call = GPU_PREFIX "MemGetAddressRange";
      e = gpu_address_range(&base, &size, *out);
      if (e == gpuSuccess)
        rc = check_range(kind, &pl, bytes, size - (size_t)((char *)*out - (char *)base),
                         "the imported pool allocation");
      if (e != gpuSuccess || rc) {
        gpuFree(*out);
        gpuMemPoolDestroy(pool);
        *out = NULL;
      }
    }
    gpu_leave(prev);
    if (rc)
      return rc;
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
  if (token == &own_process)
    return DEVMM_OK; /* this process's own memory: its owner frees it */
  int prev;
  IPC_ENTER(r, prev);
  const char *call = GPU_PREFIX "IpcCloseMemHandle";
#if GPU_HAS_POOL_IPC
  if (r->kind == KIND_ASYNC) { /* an imported pool's pointer: freed, then the imported pool */
    call = GPU_PREFIX "Free";
    e = gpuFree(ptr);
    gpuMemPoolDestroy((gpuMemPool_t)token);
  } else
#endif
    e = close_mapping(token); /* the last close closes the runtime's mapping */
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
