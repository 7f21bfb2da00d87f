/* The thread-safe adaptor: one mutex around every operation of its upstream. */
#include "../resource/resource_internal.h"

#include <pthread.h>
#include <stdlib.h>

#define LOCKED(self, call)                                                                         \
  do {                                                                                             \
    pthread_mutex_t *m_ = (self)->ctx;                                                             \
    pthread_mutex_lock(m_);                                                                        \
    int rc_ = (call);                                                                              \
    pthread_mutex_unlock(m_);                                                                      \
    return rc_;                                                                                    \
  } while (0)

static int ts_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream stream,
                       void **out) {
  LOCKED(self, self->upstream->ops.allocate(self->upstream, bytes, align, stream, out));
}
static int ts_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                         devmm_stream stream) {
  LOCKED(self, self->upstream->ops.deallocate(self->upstream, ptr, bytes, align, stream));
}
static int ts_mem_info(devmm_resource *self, size_t *f, size_t *t) {
  LOCKED(self, devmm__forward_mem_info(self, f, t));
}
static int ts_copy(devmm_resource *self, void *d, const void *s, size_t n, devmm_stream st) {
  LOCKED(self, devmm__forward_copy(self, d, s, n, st));
}
static int ts_memset(devmm_resource *self, void *d, int v, size_t n, devmm_stream st) {
  LOCKED(self, devmm__forward_memset(self, d, v, n, st));
}
static int ts_stream_wait(devmm_resource *self, devmm_stream a, devmm_stream b) {
  LOCKED(self, devmm__forward_stream_wait(self, a, b));
}
static int ts_synchronize(devmm_resource *self, devmm_stream s) {
  LOCKED(self, devmm__forward_synchronize(self, s));
}
static void ts_destroy(devmm_resource *self) {
  pthread_mutex_destroy(self->ctx);
  free(self->ctx);
}

static const devmm_resource_ops thread_safe_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = ts_allocate,
    .deallocate = ts_deallocate,
    .mem_info = ts_mem_info,
    .copy = ts_copy,
    .memset = ts_memset,
    .stream_wait = ts_stream_wait,
    .synchronize = ts_synchronize,
    .destroy = ts_destroy,
};

int devmm_thread_safe_adaptor_create(devmm_resource *upstream, devmm_resource **out) {
  if (out)
    *out = NULL;
  pthread_mutex_t *m = malloc(sizeof *m);
  if (!m)
    return devmm_set_error(DEVMM_ENOMEM, "thread-safe adaptor: out of host memory");
  pthread_mutex_init(m, NULL);
  int rc = devmm__adaptor_create(&thread_safe_ops, m, upstream, "thread_safe", out);
  if (rc) {
    pthread_mutex_destroy(m);
    free(m);
    return rc;
  }
  (*out)->flags |= DEVMM_RESOURCE_THREAD_SAFE;
  return DEVMM_OK;
}
