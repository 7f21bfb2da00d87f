/* The simulated runtime's access rules between devices and host memory, as CUDA's: what work of
 * a device (a memset, a kernel) may reach (its own memory, managed memory, pinned memory that is
 * its own or portable, another device's memory after peer access, a pool's memory where the pool
 * grants access), what a copy treats as pageable, and the peer and pool access API. */
#include "simrt_internal.h"

#include <stdlib.h>
#include <string.h>

static int in_any_region(const void *p) {
  for (size_t i = 0; i < rt.nregions; i++)
    if ((const char *)p >= rt.regions[i].ptr &&
        (const char *)p < rt.regions[i].ptr + rt.regions[i].size)
      return 1;
  return 0;
}

int sim__pageable(const void *p, size_t n, int d) {
  if (sim__device_of(p) >= 0 || sim__find_import(p))
    return 0;
  const sim_region *r = sim__find_region(p, n);
  if (r)
    return !r->managed && !r->portable && r->device != d;
  return !in_any_region(p); /* part of a region: sim__resolve refuses it */
}

/* Whether d's work may reach memory of device owner that pool (NULL: none) allocated. */
static int may_reach(int d, int owner, const struct simMemPool *pool) {
  if (d == owner)
    return 1;
  if (pool) /* a pool's memory does not follow peer access */
    return (pool->access >> d) & 1u;
  return (rt.peer[d] >> owner) & 1u;
}

simError_t sim__reachable(const void *p, size_t n, int d) {
  int owner = sim__device_of(p);
  if (owner >= 0) {
    sim_device *dv = &rt.devs[owner];
    const sim_block *b = &dv->blocks[sim__block_at(dv, (size_t)((const char *)p - dv->pub))];
    return may_reach(d, owner, b->pool) ? simSuccess : simErrorInvalidValue;
  }
  const sim_import *im = sim__find_import(p);
  if (im)
    return may_reach(d, im->device, NULL) ? simSuccess : simErrorInvalidValue;
  /* pageable memory: only where the platform lets the device address it (HMM, ATS) */
  return sim__pageable(p, n, d) && !rt.pageable_access ? simErrorInvalidValue : simSuccess;
}

/* Whether [p, p+n) is host memory the runtime did not allocate (no device, region or import). */
int sim__unowned(const void *p, size_t n) {
  return sim__device_of(p) < 0 && !sim__find_import(p) && !in_any_region(p) &&
         !in_any_region((const char *)p + (n ? n - 1 : 0));
}

simError_t simDeviceGetAttribute(int *value, simDeviceAttr attr, int d) {
  INJECT("DeviceGetAttribute");
  if (!value || attr != simDevAttrPageableMemoryAccess)
    return simErrorInvalidValue;
  pthread_mutex_lock(&rt.lock);
  simError_t e = sim__valid_device(d) ? simSuccess : simErrorInvalidDevice;
  if (!e)
    *value = rt.pageable_access;
  pthread_mutex_unlock(&rt.lock);
  return e;
}

void simConfigurePageableAccess(int on) {
  pthread_mutex_lock(&rt.lock);
  rt.pageable_access = on != 0;
  pthread_mutex_unlock(&rt.lock);
}

void sim__advise_pageable(const void *p, size_t n, int location) {
  size_t cap = sizeof rt.advice / sizeof rt.advice[0];
  if (rt.nadvice == cap) { /* the oldest advice is forgotten */
    memmove(&rt.advice[0], &rt.advice[1], (cap - 1) * sizeof rt.advice[0]);
    rt.nadvice--;
  }
  rt.advice[rt.nadvice++] = (struct sim_advice){(uintptr_t)p, (uintptr_t)p + n, location};
}

simError_t simPreferredLocation(const void *p, int *location) {
  pthread_mutex_lock(&rt.lock);
  simError_t e = simErrorInvalidValue;
  for (size_t i = rt.nadvice; e && i-- > 0;)
    if ((uintptr_t)p >= rt.advice[i].start && (uintptr_t)p < rt.advice[i].end) {
      *location = rt.advice[i].location;
      e = simSuccess;
    }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

void simHostFreed(const void *p, size_t n) {
  pthread_mutex_lock(&rt.lock);
  for (size_t i = 0; i < rt.nadvice;)
    if (rt.advice[i].start >= (uintptr_t)p && rt.advice[i].end <= (uintptr_t)p + n)
      rt.advice[i] = rt.advice[--rt.nadvice];
    else
      i++;
  pthread_mutex_unlock(&rt.lock);
}

simError_t simKernelArgument(simStream_t h, const void *p, size_t n) {
  pthread_mutex_lock(&rt.lock);
  struct simStream *s;
  simError_t e = sim__stream_of(h, &s);
  if (!e)
    e = sim__reachable(p, n, s->device);
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simDeviceCanAccessPeer(int *can, int d, int peer) {
  INJECT("DeviceCanAccessPeer");
  pthread_mutex_lock(&rt.lock);
  simError_t e =
      sim__valid_device(d) && sim__valid_device(peer) ? simSuccess : simErrorInvalidDevice;
  if (!e)
    *can = d != peer; /* every pair of sim devices is peer capable */
  pthread_mutex_unlock(&rt.lock);
  return e;
}

/* CUDA: peer access is the current device's to another one; enabling it twice, or disabling
 * what was not enabled, is an error. */
static simError_t set_peer(int peer, int enable) {
  pthread_mutex_lock(&rt.lock);
  int d = tls_device;
  simError_t e = !sim__valid_device(peer) || peer == d ? simErrorInvalidDevice : simSuccess;
  uint32_t bit = 1u << (peer & 31);
  if (!e && enable && (rt.peer[d] & bit))
    e = simErrorPeerAccessAlreadyEnabled;
  else if (!e && !enable && !(rt.peer[d] & bit))
    e = simErrorPeerAccessNotEnabled;
  if (!e)
    rt.peer[d] = enable ? rt.peer[d] | bit : rt.peer[d] & ~bit;
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simDeviceEnablePeerAccess(int peer, unsigned flags) {
  INJECT("DeviceEnablePeerAccess");
  return flags ? simErrorInvalidValue : set_peer(peer, 1);
}

simError_t simDeviceDisablePeerAccess(int peer) {
  INJECT("DeviceDisablePeerAccess");
  return set_peer(peer, 0);
}

simError_t simMemPoolSetAccess(simMemPool_t pool, const simMemAccessDesc *desc, size_t count) {
  INJECT("MemPoolSetAccess");
  if (!pool || (!desc && count))
    return simErrorInvalidValue;
  pthread_mutex_lock(&rt.lock);
  simError_t e = pool->destroyed ? simErrorInvalidValue : simSuccess;
  for (size_t i = 0; !e && i < count; i++) {
    int d = desc[i].location.id;
    if (desc[i].location.type != simMemLocationTypeDevice || !sim__valid_device(d))
      e = simErrorInvalidDevice;
    else if (desc[i].flags != simMemAccessFlagsProtNone &&
             desc[i].flags != simMemAccessFlagsProtRead &&
             desc[i].flags != simMemAccessFlagsProtReadWrite)
      e = simErrorInvalidValue;
    else if (d == pool->device && desc[i].flags != simMemAccessFlagsProtReadWrite)
      e = simErrorInvalidDevice; /* CUDA: the pool's own device's access cannot be revoked */
  }
  for (size_t i = 0; !e && i < count; i++) {
    uint32_t bit = 1u << desc[i].location.id;
    pool->access = desc[i].flags ? pool->access | bit : pool->access & ~bit;
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

/* ------------------------------------------------------------------ contexts as handles */

struct simCtx {
  int device, primary;
  struct simCtx *next; /* the contexts created, never freed (there is no simCtxDestroy) */
};

static struct simCtx primaries[SIM_MAX_DEVICES] = {
    {0, 1, NULL},  {1, 1, NULL},  {2, 1, NULL},  {3, 1, NULL},  {4, 1, NULL},  {5, 1, NULL},
    {6, 1, NULL},  {7, 1, NULL},  {8, 1, NULL},  {9, 1, NULL},  {10, 1, NULL}, {11, 1, NULL},
    {12, 1, NULL}, {13, 1, NULL}, {14, 1, NULL}, {15, 1, NULL},
};
static struct simCtx *created; /* under rt.lock */

__thread struct simCtx *tls_ctx;

simError_t simCtxCreate(simCtx_t *ctx, unsigned flags, int device) {
  INJECT("CtxCreate");
  pthread_mutex_lock(&rt.lock);
  simError_t e = !ctx || flags               ? simErrorInvalidValue
                 : sim__valid_device(device) ? simSuccess
                                             : simErrorInvalidDevice;
  pthread_mutex_unlock(&rt.lock);
  struct simCtx *c = e ? NULL : calloc(1, sizeof *c); /* never freed: no simCtxDestroy */
  if (!e && !c)
    e = simErrorMemoryAllocation;
  if (!e) {
    c->device = device;
    pthread_mutex_lock(&rt.lock);
    c->next = created;
    created = c;
    pthread_mutex_unlock(&rt.lock);
    *ctx = c;
    tls_ctx = c, tls_device = device, tls_bound = 1; /* as cuCtxCreate: bound at once */
  }
  return e;
}

simError_t simCtxGetCurrentHandle(simCtx_t *ctx) {
  *ctx = NULL;
  if (sim__forked()) /* the fork rule (process.c): the binding is the parent's */
    return simErrorInitializationError;
  *ctx = !tls_bound ? NULL : tls_ctx ? tls_ctx : &primaries[tls_device];
  return simSuccess;
}

simError_t simCtxSetCurrent(simCtx_t ctx) {
  if (!ctx) {
    tls_ctx = NULL, tls_bound = 0;
    return simSuccess;
  }
  tls_ctx = ctx->primary ? NULL : ctx, tls_device = ctx->device, tls_bound = 1;
  return simSuccess;
}
