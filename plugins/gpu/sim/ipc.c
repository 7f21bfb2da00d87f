/* The simulated runtime's IPC, as cudaIpc* (simrt.h, ADR 37 §Contexts and IPC): a handle names a
 * live allocation by the device's memfd (kept open by the exporter), its offset, its size, an
 * export tag and the exporter's pid; opening it reopens the memfd through /proc
 * (plugins/common/ipc_fd.h checks it first) and maps the allocation's whole 2 MiB chunk(s) as
 * device memory of the same device number: PROT_NONE to the host, reached through a private view.
 * The exporter writes each exported block's tag into the memfd past the device's bytes and clears
 * it when the block is freed; an importer reads it at open, at each use and at close, so an
 * exporter's free while an importer maps the block is a fault the importer sees. The driver-level
 * calls here need a context bound to the calling thread (simCtxGetCurrent). */
#include "simrt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <devmm/error.h>

#include "../../common/ipc_fd.h"

/* As CUDA's, a handle carries no size a receiver could widen: the importer maps the bytes the
 * exporter recorded beside the tag (sim_export_record), and the tag is random: no guessed tag
 * re-aims a handle at another export (ADR 40). */
typedef struct {
  ipcfd_ref ref; /* ref.offset: the allocation's offset in the memfd */
  int32_t pid, device;
  uint64_t memory; /* the exporter's device bytes (its file's size says so too) */
  uint64_t tag;    /* the export's random tag, which its free clears */
  uint64_t reserved;
} ipc_payload;
_Static_assert(sizeof(ipc_payload) <= sizeof(simIpcMemHandle_t), "a sim IPC handle is 64 bytes");

static __thread char ipc_reason[256];

/* A new random, nonzero export tag (getrandom); 0 if the kernel gives none. */
static uint64_t new_tag(void) {
  uint64_t t = 0;
  for (int tries = 0; !t && tries < 4; tries++)
    if (getrandom(&t, sizeof t, 0) != (ssize_t)sizeof t)
      t = 0;
  return t;
}

const char *simIpcReason(void) { return ipc_reason; }

size_t sim__tags_len(size_t memory) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t n = memory / SIM_ALIGN * sizeof(sim_export_record);
  return (n + page - 1) / page * page;
}

/* The driver-level calls' first check: a context bound to this thread (simrt.h). */
static simError_t need_context(const char *call) {
  if (tls_bound)
    return simSuccess;
  snprintf(ipc_reason, sizeof ipc_reason,
           "%s: no context is bound to this thread (SetDevice, a malloc, a copy or a memset "
           "binds one; GetDevice does not)",
           call);
  return simErrorInvalidContext;
}

simError_t sim__import_live(sim_import *im) {
  if (__atomic_load_n(im->tag_word, __ATOMIC_ACQUIRE) == im->tag)
    return simSuccess;
  if (!im->faulted) {
    im->faulted = 1;
    fprintf(stderr,
            "devmm-sim: IPC fault: process %d freed the %zu-byte allocation this process still "
            "maps from its handle (undefined behaviour in CUDA): every use and the close of the "
            "mapping fail with simErrorIllegalAddress\n",
            (int)im->pid, im->size);
  }
  return simErrorIllegalAddress;
}

void sim__unexport(sim_device *dv, sim_block *b) {
  if (!b->export_tag)
    return;
  __atomic_store_n(&dv->tags[b->off / SIM_ALIGN].tag, (uint64_t)0, __ATOMIC_RELEASE);
  b->export_tag = 0;
}

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
  simError_t e = need_context("simMemGetAddressRange");
  if (e)
    return e;
  pthread_mutex_lock(&rt.lock);
  int d;
  char *at = NULL;
  size_t n = 0;
  sim_block *b = containing_block(p, &d);
  sim_import *im = b ? NULL : sim__find_import(p);
  if (b) {
    at = rt.devs[d].pub + b->off;
    n = b->size;
  } else if (im && (char *)p >= im->ptr && (char *)p < im->ptr + im->size) {
    at = im->ptr; /* the exported allocation */
    n = im->size;
  } else if (im) {
    at = im->pub_map; /* the rest of its chunk: the whole mapping */
    n = im->map_len;
  }
  pthread_mutex_unlock(&rt.lock);
  if (!at)
    return simErrorInvalidValue;
  if (base)
    *base = at;
  if (size)
    *size = n;
  return simSuccess;
}

simError_t simIpcGetMemHandle(simIpcMemHandle_t *handle, void *p) {
  INJECT("IpcGetMemHandle");
  if (!handle)
    return simErrorInvalidValue;
  simError_t e = need_context("simIpcGetMemHandle");
  if (e)
    return e;
  pthread_mutex_lock(&rt.lock);
  int d;
  /* as CUDA: an interior pointer gives the handle of the enclosing allocation (its base) */
  sim_block *b = containing_block(p, &d);
  ipc_payload pl;
  memset(&pl, 0, sizeof pl);
  e = b ? simSuccess : simErrorInvalidValue;
  if (!e && ipcfd_describe(rt.devs[d].fd, b->off, &pl.ref) != 0)
    e = simErrorUnknown;
  if (!e && !b->export_tag) {
    sim_export_record *rec = &rt.devs[d].tags[b->off / SIM_ALIGN];
    uint64_t tag = new_tag();
    if (!tag) {
      e = simErrorUnknown;
    } else { /* the size first: an importer that sees the tag sees the size */
      __atomic_store_n(&rec->size, (uint64_t)b->size, __ATOMIC_RELAXED);
      __atomic_store_n(&rec->tag, tag, __ATOMIC_RELEASE);
      b->export_tag = tag;
    }
  }
  if (!e) {
    pl.pid = (int32_t)getpid();
    pl.device = d;
    pl.tag = b->export_tag;
    pl.memory = rt.devs[d].size;
    memset(handle, 0, sizeof *handle);
    memcpy(handle->reserved, &pl, sizeof pl);
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

/* The open import of the same handle, or NULL. Caller holds the lock. */
static sim_import *find_open(const ipc_payload *pl) {
  for (size_t i = 0; i < rt.nimports; i++) {
    sim_import *im = &rt.imports[i];
    if (im->ino == pl->ref.ino && im->dev == pl->ref.dev && im->off == pl->ref.offset &&
        im->tag == pl->tag && im->pid == pl->pid && im->device == pl->device)
      return im;
  }
  return NULL;
}

/* A forged or malformed payload's complaint, or NULL: the allocation must start in the device's
 * bytes, at a block boundary, with a tag. */
static const char *malformed(const ipc_payload *pl) {
  if (!pl->tag)
    return "it names no export";
  if (pl->memory < SIM_ALIGN || pl->memory % 4096 || pl->ref.offset % SIM_ALIGN)
    return "its device size or offset is not one the runtime makes";
  if (pl->ref.offset >= pl->memory)
    return "its allocation starts past the device's memory";
  return NULL;
}

/* The exporter's record of the export pl names, read from fd before anything is mapped: its
 * size in *size, or the complaint (the tag compared in constant time). The file's size must be
 * the one the handle's device size makes: that word cannot be forged either. */
static const char *exported(int fd, const ipc_payload *pl, uint64_t *size, int *freed) {
  struct stat st;
  sim_export_record rec;
  uint64_t at = pl->memory + pl->ref.offset / SIM_ALIGN * sizeof rec;
  *freed = 0;
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != pl->memory + sim__tags_len(pl->memory))
    return "its device size is not the exporter's";
  if (pread(fd, &rec, sizeof rec, (off_t)at) != (ssize_t)sizeof rec)
    return "the exporter's record of it cannot be read";
  if ((rec.tag ^ pl->tag) != 0) {
    *freed = 1;
    return "the exporting process has no export of this tag at this offset (freed, or the "
           "handle is forged)";
  }
  if (!rec.size || rec.size % SIM_ALIGN || rec.size > pl->memory - pl->ref.offset)
    return "the exporter's record of it is not one the runtime makes";
  *size = rec.size;
  return NULL;
}

/* Maps the chunk(s) of pl's allocation (size bytes, the exporter's record) from fd: the import's
 * mappings and tag page. */
static simError_t map_import(int fd, const ipc_payload *pl, uint64_t size, sim_import *im) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uint64_t start = pl->ref.offset / SIM_CHUNK * SIM_CHUNK;
  uint64_t end = (pl->ref.offset + size + SIM_CHUNK - 1) / SIM_CHUNK * SIM_CHUNK;
  if (end > pl->memory)
    end = pl->memory; /* a device smaller than a chunk, or its last one */
  size_t len = (size_t)(end - start);
  uint64_t word = pl->memory + pl->ref.offset / SIM_ALIGN * sizeof(sim_export_record);
  uint64_t wpage = word / page * page;
  memset(im, 0, sizeof *im);
  im->pub_map = mmap(NULL, len, PROT_NONE, MAP_SHARED, fd, (off_t)start);
  im->priv_map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)start);
  im->tag_map = mmap(NULL, page, PROT_READ, MAP_SHARED, fd, (off_t)wpage);
  if (im->pub_map == MAP_FAILED || im->priv_map == MAP_FAILED || im->tag_map == MAP_FAILED) {
    if (im->pub_map != MAP_FAILED)
      munmap(im->pub_map, len);
    if (im->priv_map != MAP_FAILED)
      munmap(im->priv_map, len);
    if (im->tag_map != MAP_FAILED)
      munmap(im->tag_map, page);
    snprintf(ipc_reason, sizeof ipc_reason, "cannot map %zu bytes", len);
    return simErrorMemoryAllocation;
  }
  im->map_len = len;
  im->tag_map_len = page;
  im->tag_word = (volatile uint64_t *)((char *)im->tag_map + (word - wpage));
  im->ptr = im->pub_map + (pl->ref.offset - start);
  im->size = (size_t)size;
  im->device = pl->device;
  im->refs = 1;
  im->ino = pl->ref.ino;
  im->dev = pl->ref.dev;
  im->off = pl->ref.offset;
  im->tag = pl->tag;
  im->pid = pl->pid;
  return simSuccess;
}

static void unmap_import(sim_import *im) {
  munmap(im->pub_map, im->map_len);
  munmap(im->priv_map, im->map_len);
  munmap(im->tag_map, im->tag_map_len);
}

simError_t simIpcOpenMemHandle(void **p, simIpcMemHandle_t handle, unsigned flags) {
  INJECT("IpcOpenMemHandle");
  (void)flags;
  ipc_reason[0] = '\0';
  if (!p)
    return simErrorInvalidValue;
  *p = NULL;
  simError_t e = need_context("simIpcOpenMemHandle");
  if (e)
    return e;
  ipc_payload pl;
  memcpy(&pl, handle.reserved, sizeof pl);
  pthread_mutex_lock(&rt.lock);
  int ok_device = sim__valid_device(pl.device);
  sim_import *open = ok_device ? find_open(&pl) : NULL;
  if (open && (e = sim__import_live(open)) == simSuccess) {
    open->refs++; /* as CUDA: the same pointer, counted */
    *p = open->ptr;
  }
  pthread_mutex_unlock(&rt.lock);
  if (!ok_device) {
    snprintf(ipc_reason, sizeof ipc_reason, "the handle's device sim:%d does not exist here",
             (int)pl.device);
    return simErrorInvalidDevice;
  }
  if (open) {
    if (e)
      snprintf(ipc_reason, sizeof ipc_reason,
               "process %d freed this allocation while this process maps it", (int)pl.pid);
    return e;
  }
  if (pl.pid == (int32_t)getpid()) {
    snprintf(ipc_reason, sizeof ipc_reason,
             "the handle was exported by this process (%d): CUDA opens a handle only in another "
             "process",
             (int)pl.pid);
    return simErrorInvalidContext;
  }
  const char *bad = malformed(&pl);
  if (bad) {
    snprintf(ipc_reason, sizeof ipc_reason, "the handle is not one the runtime made: %s", bad);
    return simErrorInvalidResourceHandle;
  }
  int status;
  ipcfd_ref whole = pl.ref;
  whole.offset = 0; /* the device's bytes and its tags, all there */
  static const ipcfd_expect device_memfd = {IPCFD_NAME_SIM, "simulated device", NULL};
  int fd = ipcfd_open(&whole, pl.pid, pl.memory + sim__tags_len(pl.memory), &device_memfd, &status,
                      ipc_reason, sizeof ipc_reason);
  if (fd < 0) /* an exporter gone: CUDA's generic error; anything else: not a handle */
    return status == DEVMM_ENOENT ? simErrorMapBufferObjectFailed : simErrorInvalidResourceHandle;
  uint64_t size = 0;
  int freed;
  bad = exported(fd, &pl, &size, &freed);
  if (bad) {
    close(fd);
    snprintf(ipc_reason, sizeof ipc_reason, "process %d: %s", (int)pl.pid, bad);
    return freed ? simErrorMapBufferObjectFailed : simErrorInvalidResourceHandle;
  }
  sim_import im;
  e = map_import(fd, &pl, size, &im);
  close(fd);
  if (e)
    return e;
  if (*im.tag_word != im.tag) {
    unmap_import(&im);
    snprintf(ipc_reason, sizeof ipc_reason, "the exporting process %d has freed the allocation",
             (int)pl.pid);
    return simErrorMapBufferObjectFailed;
  }
  pthread_mutex_lock(&rt.lock);
  if (rt.nimports == rt.icap) {
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
    rt.imports[rt.nimports++] = im;
    *p = im.ptr;
  }
  pthread_mutex_unlock(&rt.lock);
  if (e) {
    unmap_import(&im);
    snprintf(ipc_reason, sizeof ipc_reason, "out of host memory");
  }
  return e;
}

simError_t simIpcCloseMemHandle(void *p) {
  INJECT("IpcCloseMemHandle");
  simError_t e = need_context("simIpcCloseMemHandle");
  if (e)
    return e;
  pthread_mutex_lock(&rt.lock);
  e = simErrorInvalidValue;
  for (size_t i = 0; i < rt.nimports; i++)
    if (rt.imports[i].ptr == p) {
      sim_import *im = &rt.imports[i];
      e = sim__import_live(im); /* the exporter's free came first: the fault, at the close too */
      if (--im->refs == 0) {
        unmap_import(im);
        rt.imports[i] = rt.imports[--rt.nimports];
      }
      break;
    }
  pthread_mutex_unlock(&rt.lock);
  if (e == simErrorIllegalAddress)
    snprintf(ipc_reason, sizeof ipc_reason,
             "the exporter freed the allocation before this process closed it");
  return e;
}

/* ------------------------------------------------------------------ the test entry's raw calls
 * (include/devmm/sim.h): the runtime's own answers, with no devmm between */

#define API __attribute__((visibility("default")))

API int devmm_sim_address_range(void *ptr, void **base, size_t *size) {
  return simMemGetAddressRange(base, size, ptr);
}

API int devmm_sim_ipc_get(void *ptr, unsigned char handle[64]) {
  simIpcMemHandle_t h;
  simError_t e = simIpcGetMemHandle(&h, ptr);
  if (!e)
    memcpy(handle, h.reserved, sizeof h.reserved);
  return e;
}

API int devmm_sim_ipc_open(const unsigned char handle[64], void **ptr) {
  simIpcMemHandle_t h;
  memcpy(h.reserved, handle, sizeof h.reserved);
  return simIpcOpenMemHandle(ptr, h, 0);
}

API int devmm_sim_ipc_close(void *ptr) { return simIpcCloseMemHandle(ptr); }

API const char *devmm_sim_ipc_reason(void) { return simIpcReason(); }
