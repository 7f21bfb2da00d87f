/* Buffers and tensors.
 *
 * A buffer has two counts. `refs` keeps the object alive (the owner's handle, each tensor,
 * each export). `holds` keeps the memory alive: the owner's hold (until devmm_buffer_free)
 * plus one per export. The memory goes back to the resource when holds reach 0; the object is
 * freed when refs reach 0. So free() twice, or free() while numpy still has a view, is safe.
 *
 * Streams (ADR 11): the owner's free is ordered on the allocation stream, which the owner keeps
 * alive until then. A free that happens when the last consumer lets go, or of memory handed to
 * a consumer's own stream, cannot use that stream (it may be destroyed by now) nor know the
 * consumers' streams: a background thread waits for the whole device, then frees on the
 * device's default stream. */
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct devmm_buffer {
  atomic_long refs;
  atomic_long holds;
  atomic_int owner; /* 1 until the owner calls devmm_buffer_free */
  devmm_device device;
  void *ptr;
  size_t nbytes, alignment;
  devmm_resource *resource;
  devmm_stream stream;
  atomic_int foreign; /* handed to a consumer stream other than `stream` */
};

struct devmm_tensor {
  devmm_buffer *buffer;
  size_t byte_offset;
  devmm_dtype dtype;
  int32_t ndim;
  int32_t readonly;
  int64_t dims[]; /* shape[ndim] then strides[ndim] */
};

/* ================================================================ buffer */

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
        devmm__log(DEVMM_LOG_WARN, NULL,
                   "freeing %zu bytes at %p: cannot wait for its consumers' streams (%s); "
                   "freeing it now",
                   d->nbytes, d->ptr, devmm_last_error());
      }
      if (devmm_deallocate(d->resource, d->ptr, d->nbytes, d->alignment, stream))
        devmm__log(DEVMM_LOG_ERROR, NULL, "freeing %zu bytes at %p through '%s' failed: %s",
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
    devmm__log(DEVMM_LOG_ERROR, NULL, "freeing %zu bytes at %p through '%s' failed: %s", b->nbytes,
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

/* ================================================================ tensor */

int devmm_tensor_create(devmm_buffer *buf, devmm_dtype dtype, int ndim, const int64_t *shape,
                        const int64_t *strides, size_t byte_offset, int readonly,
                        devmm_tensor **out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_tensor_create: out is NULL");
  *out = NULL;
  if (!buf)
    return devmm_set_error(DEVMM_EINVAL, "devmm_tensor_create: buffer is NULL");
  if (ndim < 0 || ndim > DEVMM_MAX_NDIM)
    return devmm_set_error(DEVMM_EINVAL, "tensor: ndim %d out of range: expected 0..%d", ndim,
                           DEVMM_MAX_NDIM);
  if (ndim > 0 && (!shape || !strides))
    return devmm_set_error(DEVMM_EINVAL, "tensor: shape and strides must not be NULL");
  size_t itemsize = devmm_dtype_itemsize(dtype);
  if (!itemsize)
    return devmm_set_error(DEVMM_EINVAL,
                           "tensor: dtype {code=%u, bits=%u, lanes=%u} is "
                           "unknown or sub-byte",
                           dtype.code, dtype.bits, dtype.lanes);
  /* The last byte touched must lie inside the buffer. */
  int empty = 0;
  uint64_t last = 0, t;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0 || strides[i] < 0)
      return devmm_set_error(DEVMM_EINVAL,
                             "tensor: shape[%d] = %lld and strides[%d] = %lld "
                             "must be >= 0",
                             i, (long long)shape[i], i, (long long)strides[i]);
    if (shape[i] == 0)
      empty = 1;
    else if (__builtin_mul_overflow((uint64_t)(shape[i] - 1), (uint64_t)strides[i], &t) ||
             __builtin_add_overflow(last, t, &last))
      return devmm_set_error(DEVMM_EOVERFLOW, "tensor: extent overflows at dimension %d", i);
  }
  uint64_t end;
  if (!empty &&
      (__builtin_add_overflow(last, 1, &end) || __builtin_mul_overflow(end, itemsize, &end) ||
       __builtin_add_overflow(end, byte_offset, &end) || end > buf->nbytes))
    return devmm_set_error(DEVMM_EINVAL,
                           "tensor: the view (offset %zu, last element %llu of "
                           "%zu bytes) does not fit in the buffer of %zu bytes",
                           byte_offset, (unsigned long long)last, itemsize, buf->nbytes);
  devmm_tensor *tn = malloc(sizeof *tn + 2 * (size_t)ndim * sizeof(int64_t));
  if (!tn)
    return devmm_set_error(DEVMM_ENOMEM, "tensor: out of host memory");
  tn->buffer = devmm_buffer_retain(buf);
  tn->byte_offset = byte_offset;
  tn->dtype = dtype;
  tn->ndim = ndim;
  tn->readonly = readonly != 0;
  if (ndim) {
    memcpy(tn->dims, shape, (size_t)ndim * sizeof(int64_t));
    memcpy(tn->dims + ndim, strides, (size_t)ndim * sizeof(int64_t));
  }
  *out = tn;
  return DEVMM_OK;
}

int devmm__tensor_buffer(devmm_resource *r, size_t span, size_t alignment, devmm_stream stream,
                         devmm_buffer **out) {
  /* an alignment that is no power of two goes as it is: the resource says what is wrong */
  size_t dflt =
      span && !(alignment & (alignment - 1)) ? devmm_tensor_default_alignment(r->device) : 0;
  int rc = devmm_buffer_allocate(r, span, dflt > alignment ? dflt : alignment, stream, out);
  if (rc == DEVMM_ENOTSUP && dflt > alignment) /* it cannot align that far: its own will do */
    rc = devmm_buffer_allocate(r, span, alignment, stream, out);
  return rc;
}

int devmm_tensor_empty(devmm_resource *r, devmm_device device, const devmm_layout *layout, int ndim,
                       const int64_t *shape, devmm_dtype dtype, devmm_stream stream,
                       devmm_tensor **out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_tensor_empty: out is NULL");
  *out = NULL;
  size_t itemsize = devmm_dtype_itemsize(dtype);
  if (!itemsize)
    return devmm_set_error(DEVMM_EINVAL,
                           "tensor: dtype {code=%u, bits=%u, lanes=%u} is "
                           "unknown or sub-byte (cannot be allocated)",
                           dtype.code, dtype.bits, dtype.lanes);
  devmm_layout rm;
  if (!layout) {
    rm = devmm_layout_row_major();
    layout = &rm;
  }
  int64_t strides[DEVMM_MAX_NDIM];
  devmm_layout_result lr;
  int rc = devmm_layout_compute(layout, ndim, shape, itemsize, strides, &lr);
  if (rc)
    return rc;
  devmm_resource *cur = NULL;
  if (!r) {
    if ((rc = devmm_get_current_resource(device, &cur)) != 0)
      return rc;
    r = cur;
  }
  devmm_buffer *b;
  rc = devmm__tensor_buffer(r, lr.span_bytes, lr.base_alignment > itemsize ? lr.base_alignment : 0,
                            stream, &b);
  devmm_resource_release(cur);
  if (rc)
    return rc;
  rc = devmm_tensor_create(b, dtype, ndim, shape, strides, 0, 0, out);
  devmm_buffer_release(b); /* the tensor holds it now (or it is freed on failure) */
  return rc;
}

size_t devmm_tensor_default_alignment(devmm_device device) {
  switch (device.device_type) {
  case DEVMM_DEVICE_CUDA:
  case DEVMM_DEVICE_ROCM:
  case DEVMM_DEVICE_CUDA_MANAGED:
  case DEVMM_DEVICE_SIM: /* the simulator stands in for a GPU: the same alignment */
    return 256;
  default:
    return 64;
  }
}

void devmm_tensor_destroy(devmm_tensor *t) {
  if (t) {
    devmm_buffer_release(t->buffer);
    free(t);
  }
}

devmm_buffer *devmm_tensor_buffer(const devmm_tensor *t) { return t ? t->buffer : NULL; }
int devmm_tensor_ndim(const devmm_tensor *t) { return t ? t->ndim : 0; }
const int64_t *devmm_tensor_shape(const devmm_tensor *t) { return t ? t->dims : NULL; }
const int64_t *devmm_tensor_strides(const devmm_tensor *t) { return t ? t->dims + t->ndim : NULL; }
devmm_dtype devmm_tensor_dtype(const devmm_tensor *t) {
  devmm_dtype none = {0, 0, 0};
  return t ? t->dtype : none;
}
size_t devmm_tensor_byte_offset(const devmm_tensor *t) { return t ? t->byte_offset : 0; }
void *devmm_tensor_data(const devmm_tensor *t) {
  char *p = t ? devmm_buffer_ptr(t->buffer) : NULL;
  return p && devmm_tensor_size(t) ? p + t->byte_offset : NULL;
}
int devmm_tensor_readonly(const devmm_tensor *t) { return t ? t->readonly : 0; }
size_t devmm_tensor_size(const devmm_tensor *t) {
  if (!t)
    return 0;
  size_t n = 1;
  for (int i = 0; i < t->ndim; i++)
    n *= (size_t)t->dims[i];
  return n;
}

int devmm_tensor_zero(devmm_tensor *t) {
  if (!t)
    return devmm_set_error(DEVMM_EINVAL, "devmm_tensor_zero: tensor is NULL");
  devmm_buffer *b = t->buffer;
  if (devmm_buffer_is_freed(b))
    return devmm_set_error(DEVMM_ESTATE, "tensor: its buffer was freed");
  int rc = devmm_memset(b->resource, b->ptr, 0, b->nbytes, b->stream);
  /* the host may read host-accessible memory (pinned, managed) right away: the memset, queued
   * on the buffer's stream, must be done first; device memory is read in stream order */
  if (rc == DEVMM_OK && (devmm_resource_flags(b->resource) & DEVMM_RESOURCE_HOST_ACCESSIBLE))
    rc = devmm_synchronize(b->resource, b->stream);
  return rc;
}
