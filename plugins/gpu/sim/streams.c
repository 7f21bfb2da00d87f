/* The simulated runtime's streams: each is a queue run by a worker thread of its own, with a
 * seeded random delay before each operation (jitter_us); the legacy default stream (handle 0 or
 * 1) waits for every blocking stream of its device and they wait for it; handle 2 is the calling
 * thread's per-thread default stream. Then the stream API: create, destroy, synchronize. */
#include "simrt_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static __thread struct simStream *tls_per_thread[SIM_MAX_DEVICES];
static pthread_key_t per_thread_key;
static pthread_once_t per_thread_once = PTHREAD_ONCE_INIT;

/* ------------------------------------------------------------------ randomness */

static uint64_t splitmix(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* A delay in [0, max_us] from the stream's generator (seeded from seed and the stream's serial
 * number, re-seeded when the seed changes). Caller holds the lock. */
static unsigned stream_delay_us(struct simStream *s, unsigned max_us) {
  if (s->rng_epoch != rt.epoch + 1) {
    s->rng = rt.seed * 0x2545F4914F6CDD1Dull + s->serial;
    s->rng_epoch = rt.epoch + 1;
  }
  return max_us ? (unsigned)(splitmix(&s->rng) % ((uint64_t)max_us + 1)) : 0;
}

static void sleep_us(unsigned us) {
  if (!us)
    return;
  struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* ------------------------------------------------------------------ streams */

static void *worker(void *arg);

static void per_thread_exit(void *unused) {
  (void)unused;
  pthread_mutex_lock(&rt.lock);
  for (int d = 0; d < SIM_MAX_DEVICES; d++)
    if (tls_per_thread[d]) { /* queued work still runs; the worker then exits */
      tls_per_thread[d]->destroyed = 1;
      pthread_cond_signal(&tls_per_thread[d]->work);
      tls_per_thread[d] = NULL;
    }
  pthread_mutex_unlock(&rt.lock);
}

static void make_key(void) { pthread_key_create(&per_thread_key, per_thread_exit); }

/* A new stream with its worker thread. Caller holds the lock. */
static simError_t new_stream(int d, unsigned flags, int legacy, int per_thread,
                             struct simStream **out) {
  struct simStream *s = calloc(1, sizeof *s);
  if (!s)
    return simErrorMemoryAllocation;
  s->device = d;
  s->flags = flags;
  s->legacy = legacy;
  s->per_thread = per_thread;
  s->serial = ++rt.serial;
  pthread_cond_init(&s->work, NULL);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 256 << 10);
  pthread_t t;
  int rc = pthread_create(&t, &attr, worker, s);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    pthread_cond_destroy(&s->work);
    free(s);
    return simErrorMemoryAllocation;
  }
  s->next = rt.streams;
  rt.streams = s;
  *out = s;
  return simSuccess;
}

/* The stream a handle names, for the calling thread. Caller holds the lock. */
simError_t sim__stream_of(simStream_t h, struct simStream **out) {
  int d = tls_device;
  if (h == NULL || h == simStreamLegacy) {
    simError_t c = sim__capture_check(d, 1); /* an implicit dependency on a capture */
    if (c)
      return c;
    if (!rt.devs[d].legacy) {
      simError_t e = new_stream(d, simStreamDefault, 1, 0, &rt.devs[d].legacy);
      if (e)
        return e;
    }
    *out = rt.devs[d].legacy;
    return simSuccess;
  }
  if (h == simStreamPerThread) {
    if (!tls_per_thread[d]) {
      pthread_once(&per_thread_once, make_key);
      simError_t e = new_stream(d, simStreamDefault, 0, 1, &tls_per_thread[d]);
      if (e)
        return e;
      pthread_setspecific(per_thread_key, (void *)1);
    }
    *out = tls_per_thread[d];
    return simSuccess;
  }
  for (struct simStream *s = rt.streams; s; s = s->next)
    if (s == h) {
      if (s->destroyed)
        return simErrorInvalidResourceHandle;
      *out = s;
      return simSuccess;
    }
  return simErrorInvalidResourceHandle;
}

static int blocking(const struct simStream *s) {
  return !s->legacy && !(s->flags & simStreamNonBlocking);
}

static void append(struct simStream *s, sim_op *o) {
  o->next = NULL;
  if (s->tail)
    s->tail->next = o;
  else
    s->head = o;
  s->tail = o;
  s->submitted++;
  pthread_cond_signal(&s->work);
}

static sim_op *wait_stream_op(struct simStream *on) {
  sim_op *w = calloc(1, sizeof *w);
  if (w) {
    w->kind = OP_WAIT_STREAM;
    w->stream = on;
    w->target = on->submitted;
  }
  return w;
}

/* Queues o on s after the implicit waits of the legacy default stream: work on the legacy
 * stream waits for all earlier work of the device's blocking streams, and work on a blocking
 * stream waits for earlier work on the legacy stream. Caller holds the lock. */
static simError_t enqueue(struct simStream *s, sim_op *o) {
  if (s->legacy) {
    for (struct simStream *b = rt.streams; b; b = b->next)
      if (b->device == s->device && blocking(b) && b->done < b->submitted) {
        sim_op *w = wait_stream_op(b);
        if (!w)
          return simErrorMemoryAllocation;
        append(s, w);
      }
  } else if (blocking(s)) {
    struct simStream *l = rt.devs[s->device].legacy;
    if (l && l->done < l->submitted) {
      sim_op *w = wait_stream_op(l);
      if (!w)
        return simErrorMemoryAllocation;
      append(s, w);
    }
  }
  append(s, o);
  return simSuccess;
}

/* Queues a copy of o on s (with enqueue's implicit waits). Caller holds the lock. */
simError_t sim__submit(struct simStream *s, sim_op o) {
  sim_op *p = malloc(sizeof *p);
  if (!p)
    return simErrorMemoryAllocation;
  *p = o;
  if (s->capture) /* not run: a node of the capture's graph */
    return sim__capture_take(s, p);
  simError_t e = enqueue(s, p);
  if (e)
    free(p);
  return e;
}

static void execute(struct simStream *s, sim_op *o) {
  switch (o->kind) {
  case OP_COPY:
    memmove(o->dst, o->src, o->n);
    break;
  case OP_MEMSET:
    memset(o->dst, o->value, o->n);
    break;
  case OP_KERNEL:
    if (sim__async_fault("Kernel") != simSuccess)
      break; /* it faulted instead of running: the next call reports it */
    tls_kernel_device = s->device;
    o->fn(o->user);
    tls_kernel_device = -1;
    break;
  case OP_FREE: {
    pthread_mutex_lock(&rt.lock);
    if (o->device < 0) { /* a managed pool's allocation (memory.c) */
      sim__free_pool_region(o->dst);
      rt.frees_pending--;
      pthread_mutex_unlock(&rt.lock);
      break;
    }
    sim_device *dv = &rt.devs[o->device];
    unsigned delay = stream_delay_us(s, 4 * rt.jitter_us);
    /* the freed range [off, off + n): one block, or several where allocations on this stream
     * took parts of it before the free ran (memory.c) */
    for (size_t i = dv->ready ? sim__block_at(dv, o->off) : 0;
         dv->ready && i < dv->nblocks && dv->blocks[i].off < o->off + o->n; i++) {
      sim_block *b = &dv->blocks[i];
      if (b->off < o->off)
        continue;
      if (b->state == B_LIVE && b->gen != o->gen) {
        /* reused on this stream before the free ran: the poison lands in stream order, and
         * clobbers only work of the new owner that is not ordered after this stream */
        memset(dv->priv + b->off, FILL_FREED, b->size);
      } else if (b->state == B_FREEING && b->gen == o->gen) {
        memset(dv->priv + b->off, FILL_FREED, b->size); /* a late reader sees poison */
        if (!b->pool) { /* not a pool's (simMalloc memory): back to the device, never split */
          sim__release_block(dv, i);
          break;
        }
        b->pool->used -= b->size;
        b->state = B_QUARANTINE; /* the pool keeps it (used, to MemGetInfo) until a synchronize
                                  * trims it; other streams reuse it after a random delay */
        b->release_ns = sim__now_ns() + (uint64_t)delay * 1000u;
      }
    }
    rt.frees_pending--;
    pthread_mutex_unlock(&rt.lock);
    break;
  }
  case OP_RECORD:
    pthread_mutex_lock(&rt.lock);
    o->record->done = 1;
    sim__record_unref(o->record);
    pthread_mutex_unlock(&rt.lock);
    break;
  case OP_WAIT_EVENT: /* the record captured when the wait was queued */
    pthread_mutex_lock(&rt.lock);
    while (!o->record->done)
      pthread_cond_wait(&rt.progress, &rt.lock);
    sim__record_unref(o->record);
    pthread_mutex_unlock(&rt.lock);
    break;
  case OP_WAIT_STREAM:
    pthread_mutex_lock(&rt.lock);
    while (o->stream->done < o->target)
      pthread_cond_wait(&rt.progress, &rt.lock);
    pthread_mutex_unlock(&rt.lock);
    break;
  }
}

static void *worker(void *arg) {
  struct simStream *s = arg;
  pthread_mutex_lock(&rt.lock);
  for (;;) {
    while (!s->head && !s->destroyed)
      pthread_cond_wait(&s->work, &rt.lock);
    if (!s->head)
      break; /* destroyed and drained */
    sim_op *o = s->head;
    s->head = o->next;
    if (!s->head)
      s->tail = NULL;
    unsigned delay = o->kind == OP_WAIT_STREAM ? 0 : stream_delay_us(s, rt.jitter_us);
    pthread_mutex_unlock(&rt.lock);
    sleep_us(delay);
    execute(s, o);
    sim__op_free(o);
    pthread_mutex_lock(&rt.lock);
    s->done++;
    pthread_cond_broadcast(&rt.progress);
  }
  pthread_mutex_unlock(&rt.lock);
  return NULL;
}

void sim__op_free(sim_op *o) {
  if (o->user_free)
    o->user_free(o->user);
  free(o);
}

simError_t sim__launch_owned(simStream_t h, void (*fn)(void *), void *user,
                             void (*user_free)(void *)) {
  pthread_mutex_lock(&rt.lock);
  struct simStream *s;
  simError_t e = sim__stream_of(h, &s);
  if (!e)
    e = sim__submit(s, (sim_op){.kind = OP_KERNEL, .fn = fn, .user = user, .user_free = user_free});
  pthread_mutex_unlock(&rt.lock);
  return e;
}

/* Host wait until s has done everything queued so far. Caller holds the lock. */
static void drain(struct simStream *s) {
  uint64_t target = s->submitted;
  while (s->done < target) {
    sim__host_wait("a stream synchronize");
  }
}

void sim__drain_device(int d) {
  uint64_t targets[256];
  struct simStream *list[256];
  size_t n = 0;
  for (struct simStream *s = rt.streams; s && n < 256; s = s->next)
    if (s->device == d) {
      list[n] = s;
      targets[n++] = s->submitted;
    }
  for (size_t i = 0; i < n; i++)
    while (list[i]->done < targets[i]) {
      sim__host_wait("a device synchronize");
    }
}

/* ------------------------------------------------------------------ the stream API */

simError_t simStreamCreateWithFlags(simStream_t *out, unsigned flags) {
  INJECT("StreamCreateWithFlags");
  if (flags & ~simStreamNonBlocking)
    return simErrorInvalidValue;
  pthread_mutex_lock(&rt.lock);
  simError_t e = new_stream(tls_device, flags, 0, 0, out);
  if (!e) {
    rt.streams_created++;
    rt.streams_live++;
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simStreamDestroy(simStream_t h) {
  INJECT("StreamDestroy");
  pthread_mutex_lock(&rt.lock);
  struct simStream *s = NULL;
  simError_t e = h == NULL || h == simStreamLegacy || h == simStreamPerThread
                     ? simErrorInvalidResourceHandle
                     : sim__stream_of(h, &s);
  if (!e) {
    s->destroyed = 1; /* queued work still runs, then the worker exits */
    rt.streams_live--;
    pthread_cond_signal(&s->work);
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simStreamSynchronize(simStream_t h) {
  INJECT("StreamSynchronize");
  pthread_mutex_lock(&rt.lock);
  struct simStream *s;
  simError_t e = sim__stream_of(h, &s);
  if (!e && s->capture) /* its work is a graph's: there is nothing to wait for */
    e = sim__capture_invalidate(s, simErrorStreamCaptureUnsupported);
  if (!e) {
    drain(s);
    sim__pool_trim(s->device); /* pools give back what they keep above their threshold */
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}
