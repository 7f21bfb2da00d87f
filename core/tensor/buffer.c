/* Buffers (tensor_internal.h). A buffer has two counts. `refs` keeps the object alive (the owner's
 * handle, each tensor, each export). `holds` keeps the memory alive: the owner's hold (until
 * devmm_buffer_free) plus one per export. The memory goes back to the resource when holds reach 0;
 * the object is freed when refs reach 0. So free() twice, or free() while numpy still has a view,
 * is safe.
 *
 * Streams (ADR 11): the owner's free is ordered on the allocation stream, which the owner keeps
 * alive until then. A free that happens when the last consumer lets go, or of memory handed to
 * a consumer's own stream, cannot use that stream (it may be destroyed by now) nor know the
 * consumers' streams: a background thread waits for the whole device, then frees on the
 * device's default stream. */
#include "tensor_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Forks of this process's line: a buffer allocated before the last fork, with memory of a
 * device runtime, is the parent's (ADR 38, "Fork"), and a child's free of it is dropped. */
static atomic_uint forks;
static pthread_once_t forks_once = PTHREAD_ONCE_INIT;
static void forks_child(void) { atomic_fetch_add(&forks, 1); }
static void forks_init(void) { pthread_atfork(NULL, NULL, forks_child); }
static unsigned forks_now(void) {
  pthread_once(&forks_once, forks_init);
  return atomic_load_explicit(&forks, memory_order_relaxed);
}

int devmm_buffer_allocate(devmm_resource *r, size_t nbytes, size_t alignment, devmm_stream stream,
                          devmm_buffer **out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_buffer_allocate: out is NULL");
  *out = NULL;
  if (!r)
    return devmm_set_error(DEVMM_EINVAL, "devmm_buffer_allocate: resource is NULL");
  devmm_buffer *b = malloc(sizeof *b);
  if (!b)
    return devmm_set_error(DEVMM_ENOMEM, "buffer: out of host memory");
  int rc = devmm_allocate(r, nbytes, alignment, stream, &b->ptr);
  if (rc) {
    free(b);
    return rc;
  }
  atomic_init(&b->refs, 1);
  atomic_init(&b->holds, 1);
  atomic_init(&b->owner, 1);
  b->device = r->device;
  b->nbytes = nbytes;
  b->alignment = alignment;
  b->resource = devmm_resource_retain(r);
  b->stream = stream;
  b->thread = stream == DEVMM_STREAM_PER_THREAD ? devmm__thread_id() : 0;
  b->forks = forks_now();
  atomic_init(&b->foreign, 0);
  *out = b;
  return DEVMM_OK;
}

/* Whether b's stream is another thread's per-thread default stream: this thread's handle 2
 * names its own, so b's work can be waited for only device-wide (ADR 38). */
static int per_thread_elsewhere(const devmm_buffer *b) {
  return b->stream == DEVMM_STREAM_PER_THREAD && b->thread != devmm__thread_id();
}

int devmm__buffer_wrap(devmm_resource *r, void *ptr, size_t nbytes, devmm_buffer **out) {
  *out = NULL;
  devmm_buffer *b = malloc(sizeof *b);
  if (!b)
    return devmm_set_error(DEVMM_ENOMEM, "buffer: out of host memory");
  atomic_init(&b->refs, 1);
  atomic_init(&b->holds, 1);
  atomic_init(&b->owner, 1);
  b->device = r->device;
  b->ptr = ptr;
  b->nbytes = nbytes;
  b->alignment = 0;
  b->resource = devmm_resource_retain(r);
  b->stream = NULL;
  b->thread = 0;
  b->forks = forks_now();
  atomic_init(&b->foreign, 0);
  *out = b;
  return DEVMM_OK;
}

devmm_buffer *devmm_buffer_retain(devmm_buffer *b) {
  if (b)
    atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
  return b;
}

/* ---------------------------------------------------------------- deferred frees
 * A free that must come after consumers' work on streams devmm does not know waits for the
 * whole device. That wait may be long, and a deleter may run on a thread that holds a lock the
 * device's work needs (Python's GIL, for a host callback): it is done by a background thread,
 * started on first use, and the memory returns to its resource from there. */

typedef struct deferred {
  struct deferred *next;
  devmm_resource *resource; /* retained */
  void *ptr;
  size_t nbytes, alignment;
  unsigned retries; /* while a graph capture is underway */
} deferred;

static pthread_mutex_t reaper_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reaper_work = PTHREAD_COND_INITIALIZER;
static pthread_cond_t reaper_done = PTHREAD_COND_INITIALIZER;
static deferred *reaper_queue;
static int reaper_started, reaper_busy;
/* The thread's lifecycle (ADR 38, "Exit"): joinable, stopped and joined by an atexit handler
 * registered after the device runtime's own teardown (so it runs first: see defer_free), after
 * which no free is deferred again (reaper_exiting). */
static pthread_t reaper_thread;
static int reaper_stopping, reaper_exiting;
/* How long exit waits for deferred frees (ADR 38, "Exit"); past it they are left to the OS and
 * the thread, if its wait ever returns, calls nothing more (the runtime may be torn down). */
#define REAPER_EXIT_WAIT_S 2
static atomic_int reaper_abandoned;

/* Frees d once its device is idle; DEVMM_ESTATE, untouched, while a graph capture is underway:
 * the GPU plugin then refuses the device synchronize and the free, which CUDA would make
 * invalidate the capture (ADR 38), and the reaper retries after it ends. */
static int reap(deferred *d, devmm_resource **synced) {
  devmm_stream stream = NULL; /* the device's default stream: it outlives every user's */
  /* one wait covers a batch: its frees' consumers queued their work before the batch began */
  int rc = *synced == d->resource ? DEVMM_OK : devmm_synchronize(d->resource, DEVMM_STREAM_ALL);
  *synced = rc == DEVMM_OK ? d->resource : NULL;
  if (atomic_load(&reaper_abandoned))
    for (;;) /* exit gave up on it: never call into a runtime that may be torn down */
      pause();
  if (rc == DEVMM_ESTATE)
    return rc;
  if (rc != DEVMM_OK)
    devmm__diag(DEVMM_LOG_WARN, NULL,
                "freeing %zu bytes at %p: cannot wait for its consumers' streams (%s); "
                "freeing it now",
                d->nbytes, d->ptr, devmm_last_error());
  rc = devmm_deallocate(d->resource, d->ptr, d->nbytes, d->alignment, stream);
  if (rc == DEVMM_ESTATE)
    return rc;
  if (rc)
    devmm__diag(DEVMM_LOG_ERROR, NULL, "freeing %zu bytes at %p through '%s' failed: %s", d->nbytes,
                d->ptr, devmm_resource_name(d->resource), devmm_last_error());
  devmm_resource_release(d->resource);
  free(d);
  return DEVMM_OK;
}

/* At exit, what still waits for a capture's end is left to the OS (its runtime is about to go).
 * Caller holds reaper_lock. */
static void drop_at_exit(deferred *later) {
  while (later) {
    deferred *d = later;
    later = d->next;
    devmm__diag(DEVMM_LOG_WARN, NULL,
                "freeing %zu bytes at %p: left to the OS at exit (a graph capture is underway)",
                d->nbytes, d->ptr);
    devmm_resource_release(d->resource);
    free(d);
  }
}

/* Puts back what waits for a capture's end and sleeps a little. Caller holds reaper_lock. */
static void retry_later(deferred *later) {
  deferred *tail = later;
  while (tail->next)
    tail = tail->next;
  tail->next = reaper_queue;
  reaper_queue = later;
  if (++later->retries == 2000) /* about 10 s */
    devmm__diag(DEVMM_LOG_WARN, NULL,
                "freeing %zu bytes at %p: still waiting for a graph capture to end (%s)",
                later->nbytes, later->ptr, devmm_last_error());
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  t.tv_nsec += 5000000;
  if (t.tv_nsec >= 1000000000) {
    t.tv_sec++;
    t.tv_nsec -= 1000000000;
  }
  pthread_cond_timedwait(&reaper_work, &reaper_lock, &t);
}

static void *reaper(void *unused) {
  (void)unused;
  pthread_mutex_lock(&reaper_lock);
  for (;;) {
    while (!reaper_queue && !reaper_stopping)
      pthread_cond_wait(&reaper_work, &reaper_lock);
    if (!reaper_queue) /* stopping, and everything queued was freed */
      break;
    deferred *batch = reaper_queue, *later = NULL;
    reaper_queue = NULL;
    reaper_busy = 1;
    pthread_mutex_unlock(&reaper_lock);
    devmm_resource *synced = NULL; /* the resource whose device this batch waited for */
    while (batch) {
      deferred *d = batch;
      batch = d->next;
      if (reap(d, &synced) == DEVMM_ESTATE) {
        d->next = later;
        later = d;
      }
    }
    pthread_mutex_lock(&reaper_lock);
    if (later && reaper_stopping) /* the process exits inside a capture: left to the OS */
      drop_at_exit(later);
    else if (later)
      retry_later(later);
    reaper_busy = 0;
    pthread_cond_broadcast(&reaper_done);
  }
  reaper_busy = 0;
  pthread_cond_broadcast(&reaper_done);
  pthread_mutex_unlock(&reaper_lock);
  return NULL;
}

/* The atexit handler: lets the thread free what is queued, then joins it. Registered again for
 * each new device whose memory a deferred free reaches, after that device's runtime has
 * initialised (its memory exists) and so after the runtime registered its own teardown (the
 * static CUDA runtime's; the simulator's, process.c): handlers run in reverse, so this one runs
 * before any of them. The later registrations find nothing left to do. */
static void reaper_stop(void) {
  pthread_mutex_lock(&reaper_lock);
  reaper_exiting = 1; /* from now on a free is done on the caller's thread */
  int join = reaper_started && !pthread_equal(reaper_thread, pthread_self());
  reaper_stopping = 1;
  pthread_cond_broadcast(&reaper_work);
  /* at most REAPER_EXIT_WAIT_S for the consumers' work (ADR 38, "Exit"): work that never ends
   * (a blocked host function) must not make exit hang; what is left goes to the OS */
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += REAPER_EXIT_WAIT_S;
  while (join && (reaper_queue || reaper_busy) &&
         pthread_cond_timedwait(&reaper_done, &reaper_lock, &until) == 0) {
  }
  if (join && (reaper_queue || reaper_busy)) {
    atomic_store(&reaper_abandoned, 1); /* the thread makes no runtime call if it comes back */
    join = 0;
    devmm__diag(DEVMM_LOG_WARN, NULL,
                "exit: deferred frees still wait for their consumers' streams after %d s; "
                "left to the OS",
                REAPER_EXIT_WAIT_S);
  }
  pthread_mutex_unlock(&reaper_lock);
  if (join)
    pthread_join(reaper_thread, NULL);
  pthread_mutex_lock(&reaper_lock);
  reaper_started = 0;
  pthread_mutex_unlock(&reaper_lock);
}

static void reaper_prepare(void) { pthread_mutex_lock(&reaper_lock); }
static void reaper_parent(void) { pthread_mutex_unlock(&reaper_lock); }
static void reaper_child(void) { /* the child has no reaper thread: it starts its own */
  reaper_started = 0;
  reaper_stopping = 0;
  reaper_busy = 0;
  reaper_queue = NULL; /* the parent frees those */
  pthread_mutex_unlock(&reaper_lock);
}

/* Registers reaper_stop again the first time a deferred free reaches `device`, for the first 32
 * devices. Caller holds reaper_lock. */
static void stop_at_exit_after(devmm_device device) {
  static devmm_device seen[32];
  static size_t nseen;
  for (size_t i = 0; i < nseen; i++)
    if (seen[i].device_type == device.device_type && seen[i].device_id == device.device_id)
      return;
  if (nseen == sizeof seen / sizeof seen[0])
    return;
  seen[nseen++] = device;
  atexit(reaper_stop);
}

/* Queues the free; 0 if it could not (no memory, no thread, the process is exiting): the caller
 * frees at once. */
int devmm__defer_free(devmm_resource *r, void *ptr, size_t nbytes, size_t alignment) {
  deferred *d = malloc(sizeof *d);
  if (!d)
    return 0;
  *d = (deferred){NULL, devmm_resource_retain(r), ptr, nbytes, alignment, 0};
  pthread_mutex_lock(&reaper_lock);
  if (!reaper_started && !reaper_exiting) {
    reaper_started = pthread_create(&reaper_thread, NULL, reaper, NULL) == 0;
    static int atfork;
    if (reaper_started && !atfork)
      atfork = pthread_atfork(reaper_prepare, reaper_parent, reaper_child) == 0;
  }
  if (reaper_started)
    stop_at_exit_after(r->device);
  if (!reaper_started) {
    pthread_mutex_unlock(&reaper_lock);
    devmm_resource_release(d->resource);
    free(d);
    return 0;
  }
  d->next = reaper_queue;
  reaper_queue = d;
  pthread_cond_signal(&reaper_work);
  pthread_mutex_unlock(&reaper_lock);
  return 1;
}

static int defer_free(devmm_buffer *b) {
  return devmm__defer_free(b->resource, b->ptr, b->nbytes, b->alignment);
}

void devmm_deferred_frees_wait(void) {
  pthread_mutex_lock(&reaper_lock);
  while (reaper_queue || reaper_busy)
    pthread_cond_wait(&reaper_done, &reaper_lock);
  pthread_mutex_unlock(&reaper_lock);
}

static void drop_hold(devmm_buffer *b, int by_owner) {
  if (atomic_fetch_sub_explicit(&b->holds, 1, memory_order_acq_rel) != 1)
    return;
  if (b->forks != forks_now() && b->ptr && devmm__has_streams(b->resource)) {
    b->ptr = NULL; /* a forked child's copy of the parent's device buffer: not the child's */
    return;
  }
  /* the memory outlived its owner (the last consumer let go), or it was handed to consumers'
   * streams: their work may still be queued, and the allocation stream may be gone */
  if ((!by_owner || atomic_load(&b->foreign) || per_thread_elsewhere(b)) && b->ptr &&
      devmm__has_streams(b->resource) && defer_free(b)) {
    b->ptr = NULL;
    return;
  }
  /* nobody to return an error to (a free(), a release, a DLPack deleter): say it in the log */
  int rc = devmm_deallocate(b->resource, b->ptr, b->nbytes, b->alignment, b->stream);
  if (rc == DEVMM_ESTATE && b->ptr && devmm__has_streams(b->resource) && defer_free(b)) {
    b->ptr = NULL; /* refused during a graph capture (ADR 38): freed after it */
    return;
  }
  if (rc)
    devmm__diag(DEVMM_LOG_ERROR, NULL, "freeing %zu bytes at %p through '%s' failed: %s", b->nbytes,
                b->ptr, devmm_resource_name(b->resource), devmm_last_error());
  b->ptr = NULL;
}

void devmm_buffer_release(devmm_buffer *b) {
  if (!b || atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1)
    return;
  devmm_buffer_free(b);
  devmm_resource_release(b->resource);
  free(b);
}

void devmm_buffer_free(devmm_buffer *b) {
  if (b && atomic_exchange(&b->owner, 0) == 1)
    drop_hold(b, 1);
}

int devmm_buffer_is_freed(const devmm_buffer *b) {
  return b ? !atomic_load(&((devmm_buffer *)b)->owner) : 1;
}

int devmm_buffer_is_live(const devmm_buffer *b) {
  return b && atomic_load(&((devmm_buffer *)b)->holds) > 0;
}

int devmm_buffer_acquire(devmm_buffer *b) {
  if (!b)
    return devmm_set_error(DEVMM_EINVAL, "devmm_buffer_acquire: buffer is NULL");
  /* Never from 0: once the last hold went, the memory is gone (or going) whatever `owner`
   * said a moment ago. The CAS makes "still held" and "one more hold" one step. */
  long h = atomic_load_explicit(&b->holds, memory_order_relaxed);
  do {
    if (h == 0 || !atomic_load(&b->owner))
      return devmm_set_error(DEVMM_ESTATE,
                             "buffer of %zu bytes was freed: it can no longer "
                             "be exported",
                             b->nbytes);
  } while (!atomic_compare_exchange_weak_explicit(&b->holds, &h, h + 1, memory_order_acquire,
                                                  memory_order_relaxed));
  devmm_buffer_retain(b);
  return DEVMM_OK;
}

void devmm_buffer_unacquire(devmm_buffer *b) {
  if (!b)
    return;
  drop_hold(b, 0);
  devmm_buffer_release(b);
}

int devmm_buffer_stream_wait(devmm_buffer *b, devmm_stream consumer) {
  if (!b)
    return devmm_set_error(DEVMM_EINVAL, "devmm_buffer_stream_wait: buffer is NULL");
  if (devmm_buffer_is_freed(b))
    return devmm_set_error(DEVMM_ESTATE, "buffer of %zu bytes was freed: no stream can use it",
                           b->nbytes);
  int elsewhere = per_thread_elsewhere(b);
  if (consumer == b->stream && !elsewhere)
    return DEVMM_OK;
  /* another thread's per-thread stream cannot be named here: wait for the whole device */
  int rc = elsewhere                      ? devmm_synchronize(b->resource, DEVMM_STREAM_ALL)
           : consumer == DEVMM_STREAM_ALL ? DEVMM_OK
                                          : devmm_stream_wait(b->resource, consumer, b->stream);
  if (rc == DEVMM_OK) /* its free must now come after the consumer's work */
    atomic_store(&b->foreign, 1);
  return rc;
}

static int prefetch_held(devmm_buffer *b, devmm_device device, devmm_stream stream) {
  /* managed memory moves to its GPU: cuda_managed:0 to cuda:0 */
  devmm_device own = devmm_device_home(b->device), to_home = devmm_device_home(device);
  if (to_home.device_type != own.device_type || to_home.device_id != own.device_id) {
    int rc = devmm_prefetch(b->resource, NULL, 0, stream); /* memory that does not move: ENOTSUP */
    if (rc)
      return rc;
    char to[32], name[32];
    devmm_device_format(device, to, sizeof to);
    devmm_device_format(own, name, sizeof name);
    return devmm_set_error(DEVMM_EINVAL,
                           "prefetch to %s: %s moves memory only to its own device (%s)", to,
                           devmm_resource_name(b->resource), name);
  }
  return devmm_prefetch(b->resource, b->ptr, b->nbytes, stream);
}

int devmm_buffer_prefetch(devmm_buffer *b, devmm_device device, devmm_stream stream) {
  if (!b)
    return devmm_set_error(DEVMM_EINVAL, "devmm_buffer_prefetch: buffer is NULL");
  /* a hold for the call: a free on another thread meanwhile leaves the memory to the prefetch,
   * and the last hold frees it after (suite buffer: buffer_prefetch_holds_the_memory) */
  if (devmm_buffer_acquire(b))
    return devmm_set_error(DEVMM_ESTATE, "buffer of %zu bytes was freed: nothing to prefetch",
                           b->nbytes);
  int rc = prefetch_held(b, device, stream);
  devmm_buffer_unacquire(b);
  return rc;
}

void *devmm_buffer_ptr(const devmm_buffer *b) {
  return b && !devmm_buffer_is_freed(b) ? b->ptr : NULL;
}
void *devmm__buffer_held_ptr(const devmm_buffer *b) { return b->ptr; }
size_t devmm_buffer_nbytes(const devmm_buffer *b) { return b ? b->nbytes : 0; }
devmm_resource *devmm_buffer_resource(const devmm_buffer *b) { return b ? b->resource : NULL; }
devmm_device devmm_buffer_device(const devmm_buffer *b) {
  devmm_device none = {0, 0};
  return b ? b->device : none;
}
devmm_stream devmm_buffer_stream(const devmm_buffer *b) { return b ? b->stream : NULL; }
