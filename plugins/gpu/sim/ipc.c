/* The simulated runtime's IPC, as cudaIpc* (simrt.h): a handle names a live allocation by the
 * device's memfd (kept open by the exporter), an offset and the exporter's pid; opening it
 * reopens the memfd through /proc (plugins/common/ipc_fd.h checks it first) and maps the bytes as
 * device memory of the same device number: PROT_NONE to the host, reached through a private
 * view. */
#include "simrt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../common/ipc_fd.h"

typedef struct {
  ipcfd_ref ref;
  uint64_t size;
  int32_t pid, device;
} ipc_payload;
_Static_assert(sizeof(ipc_payload) <= sizeof(simIpcMemHandle_t), "a sim IPC handle is 64 bytes");

static __thread char ipc_reason[256];

const char *simIpcReason(void) { return ipc_reason; }

/* The live block containing p (not only at its start), or NULL. Called under rt.lock. */
static sim_block *containing_block(const void *p, int *dev) {
  int d = sim__device_of(p);
  if (d < 0)
    return NULL;
  sim_device *dv = &rt.devs[d];
  size_t off = (size_t)((const char *)p - dv->pub);
  sim_block *b = &dv->blocks[sim__block_at(dv, off)];
  if (b->state != B_LIVE || off < b->off || off - b->off >= b->size)
    return NULL;
  *dev = d;
  return b;
}

simError_t simMemGetAddressRange(void **base, size_t *size, void *p) {
  INJECT("MemGetAddressRange");
  pthread_mutex_lock(&rt.lock);
  int d;
  sim_block *b = containing_block(p, &d);
  if (b) {
    if (base)
      *base = rt.devs[d].pub + b->off;
    if (size)
      *size = b->size;
  }
  pthread_mutex_unlock(&rt.lock);
  return b ? simSuccess : simErrorInvalidValue;
}

simError_t simIpcGetMemHandle(simIpcMemHandle_t *handle, void *p) {
  INJECT("IpcGetMemHandle");
  if (!handle)
    return simErrorInvalidValue;
  pthread_mutex_lock(&rt.lock);
  int d;
  /* as CUDA: an interior pointer gives the handle of the enclosing allocation (its base) */
  sim_block *b = containing_block(p, &d);
  ipc_payload pl;
  memset(&pl, 0, sizeof pl);
  simError_t e = b ? simSuccess : simErrorInvalidValue;
  if (!e && ipcfd_describe(rt.devs[d].fd, b->off, &pl.ref) != 0)
    e = simErrorUnknown;
  if (!e) {
    pl.size = b->size;
    pl.pid = (int32_t)getpid();
    pl.device = d;
    memset(handle, 0, sizeof *handle);
    memcpy(handle->reserved, &pl, sizeof pl);
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simIpcOpenMemHandle(void **p, simIpcMemHandle_t handle, unsigned flags) {
  INJECT("IpcOpenMemHandle");
  (void)flags;
  ipc_reason[0] = '\0';
  if (!p)
    return simErrorInvalidValue;
  *p = NULL;
  ipc_payload pl;
  memcpy(&pl, handle.reserved, sizeof pl);
  pthread_mutex_lock(&rt.lock);
  int ok_device = sim__valid_device(pl.device);
  pthread_mutex_unlock(&rt.lock);
  if (!ok_device) {
    snprintf(ipc_reason, sizeof ipc_reason, "the handle's device sim:%d does not exist here",
             (int)pl.device);
    return simErrorInvalidDevice;
  }
  int status;
  int fd = ipcfd_open(&pl.ref, pl.pid, pl.size, &status, ipc_reason, sizeof ipc_reason);
  if (fd < 0)
    return simErrorInvalidResourceHandle;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uint64_t start = pl.ref.offset / page * page;
  size_t len = (size_t)(pl.ref.offset - start + pl.size);
  char *pub = mmap(NULL, len, PROT_NONE, MAP_SHARED, fd, (off_t)start);
  char *priv = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)start);
  close(fd);
  pthread_mutex_lock(&rt.lock);
  simError_t e = simSuccess;
  if (pub == MAP_FAILED || priv == MAP_FAILED) {
    e = simErrorMemoryAllocation;
  } else if (rt.nimports == rt.icap) {
    size_t cap = rt.icap ? rt.icap * 2 : 8;
    sim_import *g = realloc(rt.imports, cap * sizeof *g);
    if (g) {
      rt.imports = g;
      rt.icap = cap;
    } else {
      e = simErrorMemoryAllocation;
    }
  }
  if (!e) {
    char *at = pub + (pl.ref.offset - start);
    rt.imports[rt.nimports++] = (sim_import){pub, priv, at, len, (size_t)pl.size, pl.device};
    *p = at;
  }
  pthread_mutex_unlock(&rt.lock);
  if (e) {
    if (pub != MAP_FAILED)
      munmap(pub, len);
    if (priv != MAP_FAILED)
      munmap(priv, len);
    snprintf(ipc_reason, sizeof ipc_reason, "cannot map %zu bytes", len);
  }
  return e;
}

simError_t simIpcCloseMemHandle(void *p) {
  INJECT("IpcCloseMemHandle");
  pthread_mutex_lock(&rt.lock);
  simError_t e = simErrorInvalidValue;
  for (size_t i = 0; i < rt.nimports; i++)
    if (rt.imports[i].ptr == p) {
      sim_import im = rt.imports[i];
      rt.imports[i] = rt.imports[--rt.nimports];
      munmap(im.pub_map, im.map_len);
      munmap(im.priv_map, im.map_len);
      e = simSuccess;
      break;
    }
  pthread_mutex_unlock(&rt.lock);
  return e;
}
