/* PyTorch's pluggable allocator, devmm's side (include/devmm/ffi.h: devmm_torch_allocate and
 * devmm_torch_deallocate): each CUDA device's current resource, pinned at its first allocation
 * so that every free goes back to the resource that allocated. libdevmm-torch (torch_alloc.cpp,
 * beside this file) wraps these in the signatures torch calls, which throw (ADR 11); the Python
 * side is python/devmm/interop/torch.py. */
#include "../tensor/tensor_internal.h" /* devmm__defer_free */

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define TORCH_DEVICES 64
static _Atomic(devmm_resource *) torch_pinned[TORCH_DEVICES];

static devmm_resource *torch_resource(int device) {
  if (device < 0 || device >= TORCH_DEVICES) {
    devmm_set_error(DEVMM_EINVAL, "devmm_torch_allocate: device %d out of range 0..%d", device,
                    TORCH_DEVICES - 1);
    return NULL;
  }
  devmm_resource *r = atomic_load(&torch_pinned[device]);
  if (r)
    return r;
  devmm_device d = {DEVMM_DEVICE_CUDA, device};
  if (devmm_get_current_resource(d, &r) != DEVMM_OK)
    return NULL;
  devmm_resource *expected = NULL; /* first caller wins; the reference stays pinned */
  if (!atomic_compare_exchange_strong(&torch_pinned[device], &expected, r)) {
    devmm_resource_release(r);
    r = expected;
  }
  return r;
}

int devmm_torch_allocate(size_t size, int device, void *stream, void **out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_torch_allocate: out is NULL");
  *out = NULL;
  devmm_resource *r = torch_resource(device);
  if (!r)
    return devmm_last_status();
  int rc = devmm_allocate(r, size, 0, stream, out);
  if (rc) {
    char why[DEVMM__MSG_MAX];
    snprintf(why, sizeof why, "%s", devmm_last_error());
    return devmm_set_error(rc, "torch allocation of %zu bytes on cuda:%d: %s", size, device, why);
  }
  return DEVMM_OK;
}

/* ---------------------------------------------------------------- other streams (ADR 38)
 * tensor.record_stream(s) reaches the pluggable allocator's record_stream_fn(ptr, s): the streams
 * each live allocation was used on, beyond its own, until its free. The free then makes the
 * allocation stream wait for each (an event recorded on it now), so that the memory is reused
 * only after their work, as torch's caching allocator does. Without the hook (a torch that
 * offers no way to set it) every free waits for the whole device instead (free_waits). */

#define RECORD_BUCKETS 256
#define RECORD_STREAMS 8

typedef struct recorded {
  struct recorded *next;
  void *ptr;
  int n, overflow; /* more than RECORD_STREAMS streams: the free waits for the device */
  void *streams[RECORD_STREAMS];
} recorded;

static pthread_mutex_t record_lock = PTHREAD_MUTEX_INITIALIZER;
static recorded *records[RECORD_BUCKETS];
static atomic_long nrecords;
static atomic_int free_waits; /* devmm_torch_free_waits_for_device */

static recorded **bucket(void *ptr) { return &records[((uintptr_t)ptr >> 8) % RECORD_BUCKETS]; }

void devmm_torch_record_stream(void *ptr, void *stream) {
  if (!ptr)
    return;
  pthread_mutex_lock(&record_lock);
  recorded **b = bucket(ptr), *x = *b;
  while (x && x->ptr != ptr)
    x = x->next;
  if (!x && (x = calloc(1, sizeof *x)) != NULL) {
    x->ptr = ptr;
    x->next = *b;
    *b = x;
    atomic_fetch_add(&nrecords, 1);
  }
  if (!x) { /* out of host memory: its free waits for the device */
    pthread_mutex_unlock(&record_lock);
    devmm__diag(DEVMM_LOG_WARN, NULL, "record_stream(%p): out of host memory", ptr);
    return;
  }
  int i = 0;
  while (i < x->n && x->streams[i] != stream)
    i++;
  if (i == x->n && x->n < RECORD_STREAMS)
    x->streams[x->n++] = stream;
  else if (i == x->n)
    x->overflow = 1;
  pthread_mutex_unlock(&record_lock);
}

void devmm_torch_free_waits_for_device(int on) { atomic_store(&free_waits, on != 0); }

/* Takes ptr's record (NULL: none). */
static recorded *take_record(void *ptr) {
  if (!atomic_load_explicit(&nrecords, memory_order_relaxed))
    return NULL;
  pthread_mutex_lock(&record_lock);
  recorded **p = bucket(ptr);
  while (*p && (*p)->ptr != ptr)
    p = &(*p)->next;
  recorded *x = *p;
  if (x) {
    *p = x->next;
    atomic_fetch_sub(&nrecords, 1);
  }
  pthread_mutex_unlock(&record_lock);
  return x;
}

void devmm_torch_deallocate(void *ptr, size_t size, int device, void *stream) {
  devmm_resource *r =
      device >= 0 && device < TORCH_DEVICES ? atomic_load(&torch_pinned[device]) : NULL;
  if (!r) {
    devmm_set_error(DEVMM_ESTATE, "devmm_torch_deallocate: cuda:%d never allocated through devmm",
                    device);
    return;
  }
  recorded *x = ptr ? take_record(ptr) : NULL;
  int device_wide = ptr && (atomic_load(&free_waits) || (x && x->overflow));
  for (int i = 0; x && !device_wide && i < x->n; i++)
    if (x->streams[i] != stream && devmm_stream_wait(r, stream, x->streams[i]) != DEVMM_OK) {
      devmm__diag(DEVMM_LOG_WARN, NULL,
                  "devmm_torch_deallocate: cannot order the free of %p after stream %p (%s): "
                  "it waits for the whole device",
                  ptr, x->streams[i], devmm_last_error());
      device_wide = 1;
    }
  free(x);
  if (device_wide && devmm__defer_free(r, ptr, size, 0))
    return;
  if (devmm_deallocate(r, ptr, size, 0, stream) != DEVMM_OK)
    devmm__diag(DEVMM_LOG_ERROR, NULL, "devmm_torch_deallocate: %s", devmm_last_error());
}
