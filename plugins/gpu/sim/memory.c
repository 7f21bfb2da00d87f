/* The simulated runtime's memory: each device is a memfd seen through two mappings (the
 * PROT_NONE one handed out, on which the host faults at any touch, and the runtime's private
 * view); blocks of it are allocated first-fit, poisoned with 0xDD when freed and quarantined for
 * a random delay; managed and pinned memory are host regions; and sim__resolve tells what address
 * the runtime uses for a range. Every function here runs under rt.lock. */
#include "simrt_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../common/ipc_fd.h"

simError_t sim__device_ready(int d) {
  sim_device *dv = &rt.devs[d];
  if (dv->ready)
    return simSuccess;
  int fd = memfd_create(IPCFD_NAME_SIM, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return simErrorInitializationError;
  size_t tags_len = sim__tags_len(rt.memory); /* past the device's bytes: ipc.c's export tags */
  if (ftruncate(fd, (off_t)(rt.memory + tags_len)) != 0 || ipcfd_seal(fd) != 0) {
    close(fd);
    return simErrorInitializationError;
  }
  /* the address handed out faults on any host access; the runtime uses the private view */
  char *pub = mmap(NULL, rt.memory, PROT_NONE, MAP_SHARED, fd, 0);
  char *priv = mmap(NULL, rt.memory, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  void *tags = mmap(NULL, tags_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)rt.memory);
  sim_block *b = malloc(16 * sizeof *b);
  if (pub == MAP_FAILED || priv == MAP_FAILED || tags == MAP_FAILED || !b) {
    close(fd);
    if (pub != MAP_FAILED)
      munmap(pub, rt.memory);
    if (priv != MAP_FAILED)
      munmap(priv, rt.memory);
    if (tags != MAP_FAILED)
      munmap(tags, tags_len);
    free(b);
    return simErrorInitializationError;
  }
  /* device memory stays the parent's: a forked child faults on both views, as on CUDA
   * (process.c) */
  madvise(pub, rt.memory, MADV_DONTFORK);
  madvise(priv, rt.memory, MADV_DONTFORK);
  dv->fd = fd;
  dv->pub = pub;
  dv->priv = priv;
  dv->size = rt.memory;
  dv->tags = tags;
  dv->tags_len = tags_len;
  dv->blocks = b;
  dv->cap = 16;
  dv->nblocks = 1;
  b[0] = (sim_block){0, rt.memory, B_FREE, NULL, 0, NULL, 0};
  dv->default_pool = (struct simMemPool){.device = d, .is_default = 1};
  dv->managed_pool = (struct simMemPool){.device = d, .is_default = 1, .managed = 1};
  dv->ready = 1;
  return simSuccess;
}

void sim__device_teardown(int d) {
  sim_device *dv = &rt.devs[d];
  if (!dv->ready)
    return;
  munmap(dv->pub, dv->size);
  munmap(dv->priv, dv->size);
  munmap(dv->tags, dv->tags_len);
  close(dv->fd);
  free(dv->blocks);
  struct simStream *legacy = dv->legacy; /* its worker stays idle: streams are never freed */
  memset(dv, 0, sizeof *dv);
  dv->legacy = legacy;
}

/* The device whose public range holds p, or -1. */
int sim__device_of(const void *p) {
  for (int d = 0; d < SIM_MAX_DEVICES; d++) {
    sim_device *dv = &rt.devs[d];
    if (dv->ready && (const char *)p >= dv->pub && (const char *)p < dv->pub + dv->size)
      return d;
  }
  return -1;
}

/* Index of the block containing offset off. */
size_t sim__block_at(sim_device *dv, size_t off) {
  size_t lo = 0, hi = dv->nblocks;
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (dv->blocks[mid].off <= off)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

static void merge_free(sim_device *dv, size_t i) {
  if (i + 1 < dv->nblocks && dv->blocks[i + 1].state == B_FREE) {
    dv->blocks[i].size += dv->blocks[i + 1].size;
    memmove(&dv->blocks[i + 1], &dv->blocks[i + 2], (dv->nblocks - i - 2) * sizeof(sim_block));
    dv->nblocks--;
  }
  if (i > 0 && dv->blocks[i - 1].state == B_FREE) {
    dv->blocks[i - 1].size += dv->blocks[i].size;
    memmove(&dv->blocks[i], &dv->blocks[i + 1], (dv->nblocks - i - 1) * sizeof(sim_block));
    dv->nblocks--;
  }
}

void sim__release_block(sim_device *dv, size_t i) {
  dv->blocks[i].state = B_FREE;
  dv->blocks[i].pool = NULL;
  merge_free(dv, i);
}

/* Quarantined blocks whose delay has passed (all of them if `all`) become free again. */
static void release_quarantine(sim_device *dv, int all) {
  uint64_t t = sim__now_ns();
  for (size_t i = 0; i < dv->nblocks; i++)
    if (dv->blocks[i].state == B_QUARANTINE && (all || dv->blocks[i].release_ns <= t)) {
      size_t before = dv->nblocks;
      sim__release_block(dv, i);
      i -= before - dv->nblocks; /* merged with the previous block: look at it again */
      if (i == (size_t)-1)
        i = 0;
    }
}

/* A block that pool keeps and an allocation of need bytes ordered on s may take, as CUDA's
 * stream-ordered allocator reuses: any block that fits whose free is queued on s, run or not
 * (stream order puts the free first); one freed on another stream only once that free has run
 * and its random delay passed (opportunistic reuse, which a program may not count on). *at: its
 * index. A multiple of 2 MiB takes only a block that starts a chunk (ipc.c). */
static int pool_reuse(const sim_device *dv, const struct simMemPool *pool,
                      const struct simStream *s, size_t need, size_t *at) {
  uint64_t t = sim__now_ns();
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < dv->nblocks; i++) {
      const sim_block *b = &dv->blocks[i];
      if (b->pool != pool || b->size < need || (need % SIM_CHUNK == 0 && b->off % SIM_CHUNK))
        continue;
      int mine = b->freeing_on == s && (b->state == B_FREEING || b->state == B_QUARANTINE);
      if (pass == 0 ? mine : b->state == B_QUARANTINE && b->release_ns <= t) {
        *at = i;
        return 1;
      }
    }
  return 0;
}

/* Block i of dv keeps its first need bytes; the rest becomes a block of the same state, pool and
 * free (a pending free then covers both: its op names the whole range). */
static simError_t split_front(sim_device *dv, size_t i, size_t need) {
  if (dv->nblocks == dv->cap) {
    sim_block *g = realloc(dv->blocks, dv->cap * 2 * sizeof *g);
    if (!g)
      return simErrorMemoryAllocation;
    dv->blocks = g;
    dv->cap *= 2;
  }
  memmove(&dv->blocks[i + 2], &dv->blocks[i + 1], (dv->nblocks - i - 1) * sizeof(sim_block));
  dv->nblocks++;
  sim_block rest = dv->blocks[i];
  rest.off += need;
  rest.size -= need;
  rest.export_tag = 0;
  dv->blocks[i + 1] = rest;
  dv->blocks[i].size = need;
  return simSuccess;
}

/* What pool keeps reserved on dv: its blocks whose free ran. */
static uint64_t pool_kept(const sim_device *dv, const struct simMemPool *pool) {
  uint64_t kept = 0;
  for (size_t j = 0; j < dv->nblocks; j++)
    if (dv->blocks[j].state == B_QUARANTINE && dv->blocks[j].pool == pool)
      kept += dv->blocks[j].size;
  return kept;
}

void sim__pool_trim(int d) {
  sim_device *dv = &rt.devs[d];
  for (size_t i = 0; dv->ready && i < dv->nblocks;) {
    sim_block *b = &dv->blocks[i];
    uint64_t kept = b->state == B_QUARANTINE ? pool_kept(dv, b->pool) : 0;
    if (b->state != B_QUARANTINE || kept <= b->pool->release_threshold) {
      i++;
      continue;
    }
    sim__release_block(dv, i); /* back to the device */
    i = 0;                     /* blocks merged and moved: look again */
  }
}

/* Allocates n bytes of device d for pool (NULL: simMalloc). An allocation ordered on stream s
 * may take, at once, a block of the same size whose free is queued on s and has not run yet:
 * stream order puts that free before any work queued on s later, as CUDA's pools allow. */
simError_t sim__block_alloc(int d, size_t n, struct simMemPool *pool, struct simStream *s,
                            void **out) {
  simError_t e = sim__device_ready(d);
  if (e)
    return e;
  sim_device *dv = &rt.devs[d];
  size_t need = n ? (n + SIM_ALIGN - 1) / SIM_ALIGN * SIM_ALIGN : SIM_ALIGN;
  if (need < n)
    return simErrorMemoryAllocation;
  size_t at;
  if (s && pool && pool_reuse(dv, pool, s, need, &at)) {
    if (dv->blocks[at].size > need && split_front(dv, at, need) != simSuccess)
      return simErrorMemoryAllocation;
    sim_block *b = &dv->blocks[at];
    if (b->state == B_QUARANTINE) /* its free ran: back in use */
      pool->used += b->size;
    b->state = B_LIVE; /* a free still queued on s poisons it first, in s's order */
    b->gen++;
    *out = dv->pub + b->off;
    return simSuccess;
  }
  if (pool && pool->max_size && pool->used + need > pool->max_size)
    return simErrorMemoryAllocation;
  /* as CUDA's cudaMalloc: a size that is a multiple of 2 MiB gets chunks of its own (IPC maps
   * nothing else with it); smaller ones share chunks (ipc.c) */
  size_t align = need % SIM_CHUNK == 0 ? SIM_CHUNK : SIM_ALIGN;
  for (int attempt = 0; attempt < 2; attempt++) {
    for (size_t i = 0; i < dv->nblocks; i++) {
      sim_block *b = &dv->blocks[i];
      size_t lead = (align - b->off % align) % align;
      if (b->state != B_FREE || b->size < need || b->size - need < lead)
        continue;
      if (lead) { /* a free piece before the chunk-aligned start */
        if (dv->nblocks == dv->cap) {
          sim_block *g = realloc(dv->blocks, dv->cap * 2 * sizeof *g);
          if (!g)
            return simErrorMemoryAllocation;
          dv->blocks = g;
          dv->cap *= 2;
        }
        b = &dv->blocks[i];
        memmove(&dv->blocks[i + 1], &dv->blocks[i], (dv->nblocks - i) * sizeof(sim_block));
        dv->nblocks++;
        dv->blocks[i].size = lead;
        b = &dv->blocks[++i];
        *b = (sim_block){b->off + lead, b->size - lead, B_FREE, NULL, 0, NULL, 0};
      }
      if (b->size > need) { /* split */
        if (dv->nblocks == dv->cap) {
          sim_block *g = realloc(dv->blocks, dv->cap * 2 * sizeof *g);
          if (!g)
            return simErrorMemoryAllocation;
          dv->blocks = g;
          dv->cap *= 2;
          b = &dv->blocks[i];
        }
        memmove(&dv->blocks[i + 2], &dv->blocks[i + 1], (dv->nblocks - i - 1) * sizeof(sim_block));
        dv->nblocks++;
        dv->blocks[i + 1] = (sim_block){b->off + need, b->size - need, B_FREE, NULL, 0, NULL, 0};
        b->size = need;
      }
      b->state = B_LIVE;
      b->pool = pool;
      b->gen++;
      if (pool)
        pool->used += need;
      memset(dv->priv + b->off, FILL_NEW, need); /* uninitialised memory is visible as 0xCD */
      *out = dv->pub + b->off;
      return simSuccess;
    }
    release_quarantine(dv, 1); /* a real pool would also reuse frees that have completed */
  }
  return simErrorMemoryAllocation;
}

/* The live block that starts exactly at p (device memory), or NULL. */
sim_block *sim__live_block(const void *p, int *dev) {
  int d = sim__device_of(p);
  if (d < 0)
    return NULL;
  sim_device *dv = &rt.devs[d];
  size_t off = (size_t)((const char *)p - dv->pub);
  sim_block *b = &dv->blocks[sim__block_at(dv, off)];
  if (b->off != off || b->state != B_LIVE)
    return NULL;
  *dev = d;
  return b;
}

sim_region *sim__find_region(const void *p, size_t n) {
  for (size_t i = 0; i < rt.nregions; i++) {
    sim_region *r = &rt.regions[i];
    if ((const char *)p >= r->ptr && (const char *)p < r->ptr + r->size)
      return (size_t)((const char *)p - r->ptr) + n <= r->size ? r : NULL;
  }
  return NULL;
}

sim_import *sim__find_import(const void *p) {
  for (size_t i = 0; i < rt.nimports; i++)
    if ((const char *)p >= rt.imports[i].pub_map &&
        (const char *)p < rt.imports[i].pub_map + rt.imports[i].map_len)
      return &rt.imports[i];
  return NULL;
}

static int in_any_region(const void *p) {
  for (size_t i = 0; i < rt.nregions; i++)
    if ((const char *)p >= rt.regions[i].ptr &&
        (const char *)p < rt.regions[i].ptr + rt.regions[i].size)
      return 1;
  return 0;
}

/* The address the runtime uses for [p, p+n) at enqueue time: device memory must lie inside one
 * live allocation; managed/pinned regions must contain the range; other addresses are host
 * (pageable) memory. *dev is the device of device memory, else -1. */
simError_t sim__resolve(const void *p, size_t n, char **addr, int *dev) {
  *dev = sim__device_of(p);
  if (*dev >= 0) {
    sim_device *dv = &rt.devs[*dev];
    size_t off = (size_t)((const char *)p - dv->pub);
    sim_block *b = &dv->blocks[sim__block_at(dv, off)];
    if (b->state != B_LIVE || off + n > b->off + b->size || off + n < off)
      return simErrorInvalidValue; /* not (all) inside a live allocation */
    *addr = dv->priv + off;
    return simSuccess;
  }
  sim_import *im = sim__find_import(p);
  if (im) { /* anywhere in the chunk mapped, as CUDA exposes it; never after the exporter's free */
    size_t off = (size_t)((const char *)p - im->pub_map);
    if (off + n > im->map_len || off + n < off)
      return simErrorInvalidValue;
    simError_t e = sim__import_live(im);
    if (e)
      return e;
    *addr = im->priv_map + off;
    *dev = im->device;
    return simSuccess;
  }
  if (in_any_region(p) && !sim__find_region(p, n))
    return simErrorInvalidValue;
  *addr = (char *)p;
  return simSuccess;
}

simError_t sim__add_region(size_t n, int managed, void **out) {
  size_t len = n ? n : 1;
  if (rt.nregions == rt.rcap) {
    size_t cap = rt.rcap ? rt.rcap * 2 : 16;
    sim_region *g = realloc(rt.regions, cap * sizeof *g);
    if (!g)
      return simErrorMemoryAllocation;
    rt.regions = g;
    rt.rcap = cap;
  }
  char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return simErrorMemoryAllocation;
  memset(p, FILL_NEW, len);
  rt.regions[rt.nregions++] = (sim_region){p, len, managed, tls_device, 0, NULL, 0};
  *out = p;
  return simSuccess;
}

simError_t sim__drop_region(void *p, int managed) {
  for (size_t i = 0; i < rt.nregions; i++)
    if (rt.regions[i].ptr == p) {
      if (rt.regions[i].managed != managed)
        return simErrorInvalidValue;
      munmap(rt.regions[i].ptr, rt.regions[i].size);
      rt.regions[i] = rt.regions[--rt.nregions];
      return simSuccess;
    }
  return simErrorInvalidValue;
}

/* The stream-ordered free of a managed pool's allocation, when it runs: poisoned, returned to
 * the pool's count and unmapped (a later touch faults, as a use after free may). */
void sim__free_pool_region(void *p) {
  sim_region *r = sim__find_region(p, 1);
  if (!r || r->ptr != p || !r->pool)
    return;
  memset(r->ptr, FILL_FREED, r->size);
  r->pool->used -= r->size;
  sim__drop_region(p, 1);
}
