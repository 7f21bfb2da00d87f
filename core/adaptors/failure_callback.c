/* The failure-callback adaptor: on DEVMM_ENOMEM (or, with DEVMM_FAILURE_CALLBACK_ANY_ERROR, on
 * any failure) it asks a callback whether to try again. A negative answer is the callback's own
 * error, returned as it set it (tests/c/suite_failure.c, ADR 41). */
#include "../resource/resource_internal.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct {
  devmm_failure_callback cb;
  void *user;
  unsigned flags;
} failure;

static int fc_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream stream,
                       void **out) {
  failure *f = self->ctx;
  devmm_resource *up = self->upstream;
  int rc;
  for (int attempt = 0;; attempt++) {
    rc = up->ops.allocate(up, bytes, align, stream, out);
    if (rc == DEVMM_OK || (rc != DEVMM_ENOMEM && !(f->flags & DEVMM_FAILURE_CALLBACK_ANY_ERROR)))
      return rc;
    char msg[DEVMM__MSG_MAX];
    snprintf(msg, sizeof msg, "%s", devmm_last_error());
    int again = f->cb(bytes, attempt, f->user);
    if (again < 0) /* the callback's own error, message and all */
      return again;
    if (!again)
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

int devmm_failure_callback_adaptor_create_ex(devmm_resource *upstream, devmm_failure_callback cb,
                                             void *user, unsigned flags, devmm_resource **out) {
  if (out)
    *out = NULL;
  if (!cb)
    return devmm_set_error(DEVMM_EINVAL, "failure-callback adaptor: callback is NULL");
  if (flags & ~(unsigned)DEVMM_FAILURE_CALLBACK_ANY_ERROR)
    return devmm_set_error(DEVMM_EINVAL,
                           "failure-callback adaptor: unknown flags 0x%x (expected 0 or "
                           "DEVMM_FAILURE_CALLBACK_ANY_ERROR)",
                           flags);
  failure *f = malloc(sizeof *f);
  if (!f)
    return devmm_set_error(DEVMM_ENOMEM, "failure-callback adaptor: out of host memory");
  f->cb = cb;
  f->user = user;
  f->flags = flags;
  int rc = devmm__adaptor_create(&failure_ops, f, upstream, "failure_callback", out);
  if (rc)
    free(f);
  return rc;
}

int devmm_failure_callback_adaptor_create(devmm_resource *upstream, devmm_failure_callback cb,
                                          void *user, devmm_resource **out) {
  return devmm_failure_callback_adaptor_create_ex(upstream, cb, user, 0, out);
}
