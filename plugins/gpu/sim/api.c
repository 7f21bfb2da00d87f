/* The simulated runtime's API (simrt.h) on devices, memory, pools, copies and kernels: each call
 * takes rt.lock, checks its arguments as the real runtime would, and allocates (memory.c) or
 * queues work on a stream (streams.c). Streams and events: streams.c, events.c; IPC: ipc.c. */
#include "simrt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

simError_t simRuntimeGetVersion(int *v) {
  *v = 1000;
  return simSuccess;
}

simError_t simGetDeviceCount(int *n) {
  INJECT("GetDeviceCount");
  pthread_mutex_lock(&rt.lock);
  *n = rt.ndevices;
  pthread_mutex_unlock(&rt.lock);
  return *n ? simSuccess : simErrorNoDevice;
}

simError_t simGetDeviceProperties(simDeviceProp *p, int d) {
  INJECT("GetDeviceProperties");
  pthread_mutex_lock(&rt.lock);
  simError_t e = sim__valid_device(d) ? simSuccess : simErrorInvalidDevice;
  if (!e) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "devmm simulated device %d", d);
    p->totalGlobalMem = rt.memory;
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simGetDevice(int *d) {
  simError_t e = sim__enter();
  if (e)
    return e;
  *d = tls_device;
  return simSuccess;
}

simError_t simSetDevice(int d) {
  INJECT("SetDevice");
  pthread_mutex_lock(&rt.lock);
  simError_t e = sim__valid_device(d) ? simSuccess : simErrorInvalidDevice;
  pthread_mutex_unlock(&rt.lock);
  if (!e)
    tls_device = d, tls_bound = 1, tls_ctx = NULL; /* d's primary context, as cudaSetDevice */
  return e;
}

simError_t simCtxGetCurrent(int *device) {
  *device = -1;
  if (sim__forked()) /* the fork rule (process.c): the binding is the parent's */
    return simErrorInitializationError;
  *device = tls_bound ? tls_device : -1;
  return simSuccess;
}

simError_t simDeviceSynchronize(void) {
  INJECT("DeviceSynchronize");
  pthread_mutex_lock(&rt.lock);
  simError_t e = sim__capture_check(-1, 0); /* unsafe during a capture (capture.c) */
  if (!e) {
    sim__drain_device(tls_device);
    sim__pool_trim(tls_device); /* pools give back what they keep above their threshold */
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
  INJECT("MemGetInfo");
  pthread_mutex_lock(&rt.lock);
  simError_t e = sim__device_ready(tls_device);
  if (!e) {
    sim_device *dv = &rt.devs[tls_device];
    size_t f = 0;
    for (size_t i = 0; i < dv->nblocks; i++) /* what pools keep reserved is in use, as in CUDA */
      if (dv->blocks[i].state == B_FREE)
        f += dv->blocks[i].size;
    *free_bytes = f;
    *total_bytes = dv->size;
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simMalloc(void **p, size_t n) {
  INJECT("Malloc");
  pthread_mutex_lock(&rt.lock);
  simError_t e = sim__capture_check(-1, 0);
  if (!e)
    e = sim__block_alloc(tls_device, n, NULL, NULL, p);
  pthread_mutex_unlock(&rt.lock);
  tls_bound = 1; /* the runtime's calls bind the current device's context */
  return e;
}

simError_t simFree(void *p) {
  INJECT("Free");
  if (!p)
    return simSuccess;
  pthread_mutex_lock(&rt.lock);
  simError_t e = sim__capture_check(-1, 0);
  int d;
  if (!e && sim__live_block(p, &d)) {
    sim__drain_device(d); /* a synchronous free waits for the device, as cudaFree does */
    sim_block *b = sim__live_block(p, &d);
    if (b) {
      sim_device *dv = &rt.devs[d];
      sim__unexport(dv, b); /* an importer still mapping it faults from now on */
      memset(dv->priv + b->off, FILL_FREED, b->size);
      if (b->pool)
        b->pool->used -= b->size;
      sim__release_block(dv, sim__block_at(dv, b->off));
    }
  } else if (!e && sim__device_of(p) >= 0) {
    e = simErrorInvalidValue; /* not the start of a live allocation: a double free? */
  } else if (!e) {
    e = sim__drop_region(p, 1);
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simMallocManaged(void **p, size_t n, unsigned flags) {
  INJECT("MallocManaged");
  if (flags != simMemAttachGlobal)
    return simErrorInvalidValue;
  pthread_mutex_lock(&rt.lock);
  simError_t e = sim__capture_check(-1, 0);
  if (!e)
    e = sim__add_region(n, 1, p);
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simHostAlloc(void **p, size_t n, unsigned flags) {
  INJECT("HostAlloc");
  if (flags & ~simHostAllocPortable)
    return simErrorInvalidValue;
  pthread_mutex_lock(&rt.lock);
  simError_t e = sim__capture_check(-1, 0);
  if (!e)
    e = sim__add_region(n, 0, p);
  if (!e) /* default pinned memory is pinned for the current device only */
    sim__find_region(*p, n)->portable = (flags & simHostAllocPortable) != 0;
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simFreeHost(void *p) {
  INJECT("FreeHost");
  if (!p)
    return simSuccess;
  pthread_mutex_lock(&rt.lock);
  simError_t e = sim__capture_check(-1, 0);
  if (!e)
    e = sim__drop_region(p, 0);
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simMemAdvise(const void *p, size_t n, simMemoryAdvise advice, int d) {
  INJECT("MemAdvise");
  pthread_mutex_lock(&rt.lock);
  sim_region *r = sim__find_region(p, n);
  /* pageable memory takes advice where the device addresses it (HMM, ATS), as in CUDA */
  int pageable = !r && rt.pageable_access && sim__unowned(p, n);
  int host = d == simCpuDeviceId && advice == simMemAdviseSetPreferredLocation;
  simError_t e = !pageable && (!r || !r->managed) ? simErrorInvalidValue
                 : host || sim__valid_device(d)   ? simSuccess
                                                  : simErrorInvalidDevice;
  if (!e && pageable && advice == simMemAdviseSetPreferredLocation)
    sim__advise_pageable(p, n, d);
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simMemPrefetchAsync(const void *p, size_t n, int d, simStream_t h) {
  INJECT("MemPrefetchAsync");
  pthread_mutex_lock(&rt.lock);
  sim_region *r = sim__find_region(p, n);
  struct simStream *s;
  int pageable = !r && rt.pageable_access && sim__unowned(p, n); /* HMM, ATS */
  simError_t e = !pageable && (!r || !r->managed)               ? simErrorInvalidValue
                 : d != simCpuDeviceId && !sim__valid_device(d) ? simErrorInvalidDevice
                                                                : sim__stream_of(h, &s);
  pthread_mutex_unlock(&rt.lock);
  return e; /* managed memory is host memory here: there is nothing to move */
}

simError_t simDeviceGetDefaultMemPool(simMemPool_t *pool, int d) {
  INJECT("DeviceGetDefaultMemPool");
  pthread_mutex_lock(&rt.lock);
  simError_t e = sim__valid_device(d) ? sim__device_ready(d) : simErrorInvalidDevice;
  if (!e)
    *pool = &rt.devs[d].default_pool;
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simMemGetDefaultMemPool(simMemPool_t *pool, int d, int type) {
  INJECT("MemGetDefaultMemPool");
  if (type != simMemAllocationTypePinned && type != simMemAllocationTypeManaged)
    return simErrorInvalidValue;
  pthread_mutex_lock(&rt.lock);
  simError_t e = sim__valid_device(d) ? sim__device_ready(d) : simErrorInvalidDevice;
  if (!e)
    *pool =
        type == simMemAllocationTypeManaged ? &rt.devs[d].managed_pool : &rt.devs[d].default_pool;
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simMemPoolCreate(simMemPool_t *pool, const simMemPoolProps *props) {
  INJECT("MemPoolCreate");
  if (!props || props->allocType != simMemAllocationTypePinned ||
      props->location.type != simMemLocationTypeDevice)
    return simErrorInvalidValue;
  pthread_mutex_lock(&rt.lock);
  simError_t e = sim__valid_device(props->location.id) ? simSuccess : simErrorInvalidDevice;
  struct simMemPool *p = e ? NULL : calloc(1, sizeof *p);
  if (!e && !p)
    e = simErrorMemoryAllocation;
  if (!e) {
    p->device = props->location.id;
    p->max_size = props->maxSize;
    p->next = rt.pools;
    rt.pools = p;
    *pool = p;
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

/* A pool handle that exists and was not destroyed. Caller holds the lock. */
static int valid_pool(simMemPool_t pool) {
  if (!pool)
    return 0;
  for (int d = 0; d < SIM_MAX_DEVICES; d++)
    if (pool == &rt.devs[d].default_pool || pool == &rt.devs[d].managed_pool)
      return rt.devs[d].ready;
  for (struct simMemPool *p = rt.pools; p; p = p->next)
    if (p == pool)
      return !p->destroyed;
  return 0;
}

simError_t simMemPoolDestroy(simMemPool_t pool) {
  INJECT("MemPoolDestroy");
  pthread_mutex_lock(&rt.lock);
  simError_t e = valid_pool(pool) && !pool->is_default ? simSuccess : simErrorInvalidValue;
  if (!e)
    pool->destroyed = 1; /* allocations still out stay valid until freed, as in CUDA */
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simMemPoolSetAttribute(simMemPool_t pool, simMemPoolAttr attr, void *value) {
  INJECT("MemPoolSetAttribute");
  pthread_mutex_lock(&rt.lock);
  simError_t e = valid_pool(pool) && attr == simMemPoolAttrReleaseThreshold && value
                     ? simSuccess
                     : simErrorInvalidValue;
  if (!e)
    pool->release_threshold = *(uint64_t *)value;
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simMemPoolGetAttribute(simMemPool_t pool, simMemPoolAttr attr, void *value) {
  if (sim__enter())
    return simErrorInitializationError;
  pthread_mutex_lock(&rt.lock);
  simError_t e = valid_pool(pool) && attr == simMemPoolAttrReleaseThreshold && value
                     ? simSuccess
                     : simErrorInvalidValue;
  if (!e)
    *(uint64_t *)value = pool->release_threshold;
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simMallocFromPoolAsync(void **p, size_t n, simMemPool_t pool, simStream_t h) {
  INJECT("MallocFromPoolAsync");
  pthread_mutex_lock(&rt.lock);
  struct simStream *s;
  simError_t e = valid_pool(pool) ? sim__stream_of(h, &s) : simErrorInvalidValue;
  if (!e && s->capture) /* graph memory nodes are not modelled (simrt.h) */
    e = sim__capture_invalidate(s, simErrorStreamCaptureUnsupported);
  if (!e && pool->managed) { /* managed memory, counted by its pool */
    e = sim__add_region(n, 1, p);
    if (!e) {
      sim_region *r = sim__find_region(*p, 1);
      r->pool = pool;
      pool->used += r->size;
    }
  } else if (!e) {
    e = sim__block_alloc(pool->device, n, pool, s, p); /* usable by work queued on s from now on */
  }
  pthread_mutex_unlock(&rt.lock);
  tls_bound = 1;
  return e;
}

simError_t simFreeAsync(void *p, simStream_t h) {
  INJECT("FreeAsync");
  if (!p)
    return simSuccess;
  pthread_mutex_lock(&rt.lock);
  struct simStream *s;
  int d;
  sim_block *b = sim__live_block(p, &d);
  sim_region *mr = b ? NULL : sim__find_region(p, 1); /* a managed pool's */
  if (mr && (mr->ptr != p || !mr->pool || mr->freeing))
    mr = NULL;
  simError_t e = b || mr ? sim__stream_of(h, &s) : simErrorInvalidValue;
  if (!e && s->capture) /* graph memory nodes are not modelled (simrt.h) */
    e = sim__capture_invalidate(s, simErrorStreamCaptureUnsupported);
  if (!e && mr) {
    e = sim__submit(s, (sim_op){.kind = OP_FREE, .device = -1, .dst = p});
    if (!e) {
      mr->freeing = 1;
      rt.frees_pending++;
    }
  } else if (!e) {
    e = sim__submit(
        s, (sim_op){.kind = OP_FREE, .device = d, .off = b->off, .n = b->size, .gen = b->gen});
  }
  if (!e && b) {
    sim__unexport(&rt.devs[d], b);
    b->state = B_FREEING; /* any further use of p is an error from now on */
    b->freeing_on = s;
    rt.frees_pending++;
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simMemcpyAsync(void *dst, const void *src, size_t n, int kind, simStream_t h) {
  INJECT("MemcpyAsync");
  if (kind != simMemcpyDefault)
    return simErrorInvalidValue;
  if (!n)
    return simSuccess;
  pthread_mutex_lock(&rt.lock);
  struct simStream *s;
  char *d_addr, *s_addr;
  int dd, sd;
  simError_t e = sim__stream_of(h, &s);
  if (!e)
    e = sim__resolve(dst, n, &d_addr, &dd);
  if (!e)
    e = sim__resolve(src, n, &s_addr, &sd);
  char *staged = NULL; /* a pageable source is staged at the call, as CUDA does */
  if (!e && s->capture && (sim__pageable(src, n, s->device) || sim__pageable(dst, n, s->device)))
    e = sim__capture_invalidate(s, simErrorStreamCaptureUnsupported); /* as CUDA refuses it */
  if (!e && sim__pageable(src, n, s->device)) {
    if ((staged = malloc(n)) == NULL)
      e = simErrorMemoryAllocation;
    else
      memcpy(staged, s_addr, n);
  }
  if (!e) /* copies between devices are peer copies: allowed */
    e = sim__submit(s, (sim_op){.kind = OP_COPY,
                                .dst = d_addr,
                                .src = staged ? staged : s_addr,
                                .n = n,
                                .user = staged,
                                .user_free = staged ? free : NULL});
  else
    free(staged);
  if (!e && sim__pageable(dst, n, s->device)) { /* a copy to pageable memory returns when done */
    uint64_t target = s->submitted;
    while (s->done < target)
      pthread_cond_wait(&rt.progress, &rt.lock);
  }
  pthread_mutex_unlock(&rt.lock);
  tls_bound = 1;
  return e;
}

simError_t simMemsetAsync(void *dst, int value, size_t n, simStream_t h) {
  INJECT("MemsetAsync");
  if (!n)
    return simSuccess;
  pthread_mutex_lock(&rt.lock);
  struct simStream *s;
  char *addr;
  int d;
  simError_t e = sim__stream_of(h, &s);
  if (!e)
    e = sim__resolve(dst, n, &addr, &d);
  if (!e) /* pageable memory, or another device's without access: refused, as in CUDA */
    e = sim__reachable(dst, n, s->device);
  if (!e)
    e = sim__submit(s, (sim_op){.kind = OP_MEMSET, .dst = addr, .value = value, .n = n});
  pthread_mutex_unlock(&rt.lock);
  tls_bound = 1;
  return e;
}

simError_t simLaunchHostFunc(simStream_t h, void (*fn)(void *), void *user) {
  INJECT("LaunchHostFunc");
  if (!fn)
    return simErrorInvalidValue;
  pthread_mutex_lock(&rt.lock);
  struct simStream *s;
  simError_t e = sim__stream_of(h, &s);
  if (!e)
    e = sim__submit(s, (sim_op){.kind = OP_KERNEL, .fn = fn, .user = user});
  pthread_mutex_unlock(&rt.lock);
  return e;
}

void *simDeviceView(const void *p, size_t n) {
  if (sim__forked()) /* kernels still running at exit may look: no teardown check here */
    return NULL;
  pthread_mutex_lock(&rt.lock);
  void *out = NULL;
  int d = sim__device_of(p);
  if (tls_kernel_device >= 0 && sim__reachable(p, n, tls_kernel_device)) {
    /* a kernel sees only what its device may reach (access.c) */
  } else if (d >= 0) {
    sim_device *dv = &rt.devs[d];
    size_t off = (size_t)((const char *)p - dv->pub);
    if (off + n <= dv->size && off + n >= off)
      out = dv->priv + off;
  } else if (sim__find_region(p, n)) {
    out = (void *)p;
  } else if (rt.pageable_access && sim__unowned(p, n)) {
    out = (void *)p; /* pageable memory the device addresses (HMM, ATS) */
  } else {
    sim_import *im = sim__find_import(p);
    size_t off = im ? (size_t)((const char *)p - im->pub_map) : 0;
    if (im && off + n <= im->map_len && off + n >= off && sim__import_live(im) == simSuccess)
      out = im->priv_map + off;
  }
  pthread_mutex_unlock(&rt.lock);
  return out;
}
