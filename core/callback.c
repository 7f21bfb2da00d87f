/* Callback resources: allocate/free through plain function pointers (Python-defined resources).
 * The trampolines check one global flag first, so that once the front end's runtime is gone
 * (devmm_callbacks_disable) a late free is skipped instead of entering a dead interpreter. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  devmm_callback_alloc_fn alloc;
  devmm_callback_free_fn free_fn;
  void (*destroy)(void *);
  void *user;
} callback;

static atomic_int disabled;

void devmm_callbacks_disable(void) { atomic_store(&disabled, 1); }
int devmm__callbacks_enabled(void) { return !atomic_load(&disabled); }

static int cb_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream stream,
                       void **out) {
  callback *c = self->ctx;
  *out = NULL;
  if (atomic_load(&disabled))
    return devmm_set_error(DEVMM_ESTATE,
                           "resource '%s': its callbacks are disabled (the "
                           "front end is shutting down)",
                           self->name);
  devmm_clear_error();
  int rc = c->alloc(c->user, bytes, align, stream, out);
  if (rc == DEVMM_OK && !*out)
    return devmm_set_error(DEVMM_ECALLBACK,
                           "resource '%s': the allocate callback returned no "
                           "pointer for %zu bytes",
                           self->name, bytes);
  if (rc && !*devmm_last_error())
    devmm_set_error(rc, "resource '%s': the allocate callback failed (%s)", self->name,
                    devmm_status_name(rc));
  return rc;
}

static int cb_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                         devmm_stream stream) {
  callback *c = self->ctx;
  if (atomic_load(&disabled))
    return DEVMM_OK;
  return c->free_fn(c->user, ptr, bytes, align, stream);
}

static void cb_destroy(devmm_resource *self) {
  callback *c = self->ctx;
  if (c->destroy && !atomic_load(&disabled))
    c->destroy(c->user);
  free(c);
}

static const devmm_resource_ops callback_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = cb_allocate,
    .deallocate = cb_deallocate,
    .destroy = cb_destroy,
};

/* Host-accessible memory can be filled and copied by the CPU itself. */
static int host_copy(devmm_resource *self, void *dst, const void *src, size_t n, devmm_stream s) {
  (void)self, (void)s;
  memmove(dst, src, n);
  return DEVMM_OK;
}

static int host_memset(devmm_resource *self, void *dst, int v, size_t n, devmm_stream s) {
  (void)self, (void)s;
  memset(dst, v, n);
  return DEVMM_OK;
}

static const devmm_resource_ops callback_host_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = cb_allocate,
    .deallocate = cb_deallocate,
    .copy = host_copy,
    .memset = host_memset,
    .destroy = cb_destroy,
};

int devmm_callback_resource_create(devmm_callback_alloc_fn alloc, devmm_callback_free_fn free_fn,
                                   void (*destroy)(void *), void *user, devmm_device device,
                                   const char *name, unsigned flags, devmm_resource **out) {
  if (out)
    *out = NULL;
  if (!alloc || !free_fn || !out)
    return devmm_set_error(DEVMM_EINVAL, "callback resource: %s is NULL",
                           !alloc     ? "allocate"
                           : !free_fn ? "free"
                                      : "out");
  callback *c = malloc(sizeof *c);
  if (!c)
    return devmm_set_error(DEVMM_ENOMEM, "callback resource: out of host memory");
  *c = (callback){alloc, free_fn, destroy, user};
  int rc = devmm_resource_create(flags & DEVMM_RESOURCE_HOST_ACCESSIBLE ? &callback_host_ops
                                                                        : &callback_ops,
                                 c, device, name ? name : "callback", flags, out);
  if (rc)
    free(c);
  return rc;
}
