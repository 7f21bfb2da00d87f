/* The failure-callback adaptor: on DEVMM_ENOMEM it asks a callback whether to try again. */
#include "../resource/resource_internal.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct {
  devmm_failure_callback cb;
  void *user;
} failure;

static int fc_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream stream,
                       void **out) {
  failure *f = self->ctx;
  devmm_resource *up = self->upstream;
  int rc;
  for (int attempt = 0;; attempt++) {
    rc = up->ops.allocate(up, bytes, align, stream, out);
    if (rc != DEVMM_ENOMEM)
      return rc;
    char msg[DEVMM__MSG_MAX];
    snprintf(msg, sizeof msg, "%s", devmm_last_error());
    if (!f->cb(bytes, attempt, f->user))
      return devmm_set_error(rc,
                             "%s (failure callback gave up after %d "
                             "%s)",
                             msg, attempt + 1, attempt ? "attempts" : "attempt");
  }
}

static int fc_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                         devmm_stream stream) {
  devmm_resource *up = self->upstream;
  return up->ops.deallocate(up, ptr, bytes, align, stream);
}

static void fc_destroy(devmm_resource *self) { free(self->ctx); }

static const devmm_resource_ops failure_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = fc_allocate,
    .deallocate = fc_deallocate,
    .mem_info = devmm__forward_mem_info,
    .copy = devmm__forward_copy,
    .memset = devmm__forward_memset,
    .stream_wait = devmm__forward_stream_wait,
    .synchronize = devmm__forward_synchronize,
    .destroy = fc_destroy,
};

int devmm_failure_callback_adaptor_create(devmm_resource *upstream, devmm_failure_callback cb,
                                          void *user, devmm_resource **out) {
  if (out)
    *out = NULL;
  if (!cb)
    return devmm_set_error(DEVMM_EINVAL, "failure-callback adaptor: callback is NULL");
  failure *f = malloc(sizeof *f);
  if (!f)
    return devmm_set_error(DEVMM_ENOMEM, "failure-callback adaptor: out of host memory");
  f->cb = cb;
  f->user = user;
  int rc = devmm__adaptor_create(&failure_ops, f, upstream, "failure_callback", out);
  if (rc)
    free(f);
  return rc;
}
