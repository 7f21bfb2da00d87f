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
  atomic_init(&b->foreign, 0);
  *out = b;
  return DEVMM_OK;
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
} deferred;

static pthread_mutex_t reaper_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reaper_work = PTHREAD_COND_INITIALIZER;
static pthread_cond_t reaper_done = PTHREAD_COND_INITIALIZER;
static deferred *reaper_queue;
static int reaper_started, reaper_busy;

static void *reaper(void *unused) {
  (void)unused;
  pthread_mutex_lock(&reaper_lock);
  for (;;) {
    while (!reaper_queue)
      pthread_cond_wait(&reaper_work, &reaper_lock);
    deferred *batch = reaper_queue;
    reaper_queue = NULL;
    reaper_busy = 1;
    pthread_mutex_unlock(&reaper_lock);
    while (batch) {
      deferred *d = batch;
      batch = d->next;
      devmm_stream stream = NULL; /* the device's default stream: it outlives every user's */
      if (devmm_synchronize(d->resource, DEVMM_STREAM_ALL) != DEVMM_OK) {
        devmm__diag(DEVMM_LOG_WARN, NULL,
                    "freeing %zu bytes at %p: cannot wait for its consumers' streams (%s); "
                    "freeing it now",
                    d->nbytes, d->ptr, devmm_last_error());
      }
      if (devmm_deallocate(d->resource, d->ptr, d->nbytes, d->alignment, stream))
        devmm__diag(DEVMM_LOG_ERROR, NULL, "freeing %zu bytes at %p through '%s' failed: %s",
                    d->nbytes, d->ptr, devmm_resource_name(d->resource), devmm_last_error());
      devmm_resource_release(d->resource);
      free(d);
    }
    pthread_mutex_lock(&reaper_lock);
    reaper_busy = 0;
    pthread_cond_broadcast(&reaper_done);
  }
  return NULL;
}

static void reaper_prepare(void) { pthread_mutex_lock(&reaper_lock); }
static void reaper_parent(void) { pthread_mutex_unlock(&reaper_lock); }
static void reaper_child(void) { /* the child has no reaper thread: it starts its own */
  reaper_started = 0;
  reaper_busy = 0;
  reaper_queue = NULL; /* the parent frees those */
  pthread_mutex_unlock(&reaper_lock);
}

/* Queues the free; 0 if it could not (no memory, no thread): the caller frees at once. */
static int defer_free(devmm_buffer *b) {
  deferred *d = malloc(sizeof *d);
  if (!d)
    return 0;
  *d = (deferred){NULL, devmm_resource_retain(b->resource), b->ptr, b->nbytes, b->alignment};
  pthread_mutex_lock(&reaper_lock);
  if (!reaper_started) {
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    reaper_started = pthread_create(&t, &attr, reaper, NULL) == 0;
    pthread_attr_destroy(&attr);
    static int atfork;
    if (reaper_started && !atfork)
      atfork = pthread_atfork(reaper_prepare, reaper_parent, reaper_child) == 0;
  }
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

void devmm_deferred_frees_wait(void) {
  pthread_mutex_lock(&reaper_lock);
  while (reaper_queue || reaper_busy)
    pthread_cond_wait(&reaper_done, &reaper_lock);
  pthread_mutex_unlock(&reaper_lock);
}

static void drop_hold(devmm_buffer *b, int by_owner) {
  if (atomic_fetch_sub_explicit(&b->holds, 1, memory_order_acq_rel) != 1)
    return;
  /* the memory outlived its owner (the last consumer let go), or it was handed to consumers'
   * streams: their work may still be queued, and the allocation stream may be gone */
  if ((!by_owner || atomic_load(&b->foreign)) && b->ptr && devmm__has_streams(b->resource) &&
      defer_free(b)) {
    b->ptr = NULL;
    return;
  }
  /* nobody to return an error to (a free(), a release, a DLPack deleter): say it in the log */
  if (devmm_deallocate(b->resource, b->ptr, b->nbytes, b->alignment, b->stream))
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
  if (consumer == b->stream)
    return DEVMM_OK;
  int rc =
      consumer == DEVMM_STREAM_ALL ? DEVMM_OK : devmm_stream_wait(b->resource, consumer, b->stream);
  if (rc == DEVMM_OK) /* its free must now come after the consumer's work */
    atomic_store(&b->foreign, 1);
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
