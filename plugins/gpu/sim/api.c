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
  *d = tls_device;
  return simSuccess;
}

simError_t simSetDevice(int d) {
  INJECT("SetDevice");
  pthread_mutex_lock(&rt.lock);
  simError_t e = sim__valid_device(d) ? simSuccess : simErrorInvalidDevice;
  pthread_mutex_unlock(&rt.lock);
  if (!e)
    tls_device = d;
  return e;
}

simError_t simDeviceSynchronize(void) {
  INJECT("DeviceSynchronize");
  pthread_mutex_lock(&rt.lock);
  sim__drain_device(tls_device);
  pthread_mutex_unlock(&rt.lock);
  return simSuccess;
}

simError_t simMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
  INJECT("MemGetInfo");
  pthread_mutex_lock(&rt.lock);
  simError_t e = sim__device_ready(tls_device);
  if (!e) {
    sim_device *dv = &rt.devs[tls_device];
    size_t f = 0;
    for (size_t i = 0; i < dv->nblocks; i++)
      if (dv->blocks[i].state == B_FREE || dv->blocks[i].state == B_QUARANTINE)
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
  simError_t e = sim__block_alloc(tls_device, n, NULL, NULL, p);
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simFree(void *p) {
  INJECT("Free");
  if (!p)
    return simSuccess;
  pthread_mutex_lock(&rt.lock);
  simError_t e = simSuccess;
  int d;
  if (sim__live_block(p, &d)) {
    sim__drain_device(d); /* a synchronous free waits for the device, as cudaFree does */
    sim_block *b = sim__live_block(p, &d);
    if (b) {
      sim_device *dv = &rt.devs[d];
      memset(dv->priv + b->off, FILL_FREED, b->size);
      if (b->pool)
        b->pool->used -= b->size;
      sim__release_block(dv, sim__block_at(dv, b->off));
    }
  } else if (sim__device_of(p) >= 0) {
    e = simErrorInvalidValue; /* not the start of a live allocation: a double free? */
  } else {
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
  simError_t e = sim__add_region(n, 1, p);
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simHostAlloc(void **p, size_t n, unsigned flags) {
  INJECT("HostAlloc");
  (void)flags;
  pthread_mutex_lock(&rt.lock);
  simError_t e = sim__add_region(n, 0, p);
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simFreeHost(void *p) {
  INJECT("FreeHost");
  if (!p)
    return simSuccess;
  pthread_mutex_lock(&rt.lock);
  simError_t e = sim__drop_region(p, 0);
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simMemAdvise(const void *p, size_t n, simMemoryAdvise advice, int d) {
  INJECT("MemAdvise");
  (void)advice;
  pthread_mutex_lock(&rt.lock);
  sim_region *r = sim__find_region(p, n);
  simError_t e = !r || !r->managed      ? simErrorInvalidValue
                 : sim__valid_device(d) ? simSuccess
                                        : simErrorInvalidDevice;
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simMemPrefetchAsync(const void *p, size_t n, int d, simStream_t h) {
  INJECT("MemPrefetchAsync");
  pthread_mutex_lock(&rt.lock);
  sim_region *r = sim__find_region(p, n);
  struct simStream *s;
  simError_t e = !r || !r->managed       ? simErrorInvalidValue
                 : !sim__valid_device(d) ? simErrorInvalidDevice
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
    if (pool == &rt.devs[d].default_pool)
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
  if (!e)
    e = sim__block_alloc(pool->device, n, pool, s, p); /* usable by work queued on s from now on */
  pthread_mutex_unlock(&rt.lock);
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
  simError_t e = b ? sim__stream_of(h, &s) : simErrorInvalidValue;
  if (!e)
    e = sim__submit(s, (sim_op){.kind = OP_FREE, .device = d, .off = b->off, .gen = b->gen});
  if (!e) {
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
  if (!e) /* copies between devices are peer copies: allowed */
    e = sim__submit(s, (sim_op){.kind = OP_COPY, .dst = d_addr, .src = s_addr, .n = n});
  pthread_mutex_unlock(&rt.lock);
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
  if (!e && d >= 0 && d != s->device)
    e = simErrorInvalidValue; /* another device's memory, from this device's stream */
  if (!e)
    e = sim__submit(s, (sim_op){.kind = OP_MEMSET, .dst = addr, .value = value, .n = n});
  pthread_mutex_unlock(&rt.lock);
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
  pthread_mutex_lock(&rt.lock);
  void *out = NULL;
  int d = sim__device_of(p);
  if (d >= 0) {
    sim_device *dv = &rt.devs[d];
    size_t off = (size_t)((const char *)p - dv->pub);
    if ((tls_kernel_device < 0 || tls_kernel_device == d) && off + n <= dv->size && off + n >= off)
      out = dv->priv + off;
  } else if (sim__find_region(p, n)) {
    out = (void *)p;
  } else {
    sim_import *im = sim__find_import(p);
    size_t off = im ? (size_t)((const char *)p - im->ptr) : 0;
    if (im && (tls_kernel_device < 0 || tls_kernel_device == im->device) && off + n <= im->size &&
        off + n >= off)
      out = im->priv_map + (size_t)((const char *)p - im->pub_map);
  }
  pthread_mutex_unlock(&rt.lock);
  return out;
}
