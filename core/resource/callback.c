/* Callback resources: allocate/free through plain function pointers (Python-defined resources).
 * The trampolines check one global flag first, so that once the front end's runtime is gone
 * (devmm_callbacks_disable) a late free is skipped instead of entering a dead interpreter. */
#include "resource_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  devmm_callback_alloc_fn alloc;
  devmm_callback_free_fn free_fn;
  void (*destroy)(void *);
  void *user;
  devmm_resource *runtime; /* serves copy, memset, stream_wait, synchronize, mem_info */
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
  if (rc == DEVMM_OK && align > 1 && (uintptr_t)*out % align) {
    /* what was asked for, or nothing: given back (test_a_misaligned_pointer_from_an_allocate_
     * callback_is_refused_and_given_back) */
    void *p = *out;
    *out = NULL;
    c->free_fn(c->user, p, bytes, align, stream);
    return devmm_set_error(DEVMM_ECALLBACK,
                           "resource '%s': the allocate callback returned %p for %zu bytes "
                           "aligned to %zu: not a multiple of %zu",
                           self->name, p, bytes, align, align);
  }
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
  devmm_resource_release(c->runtime);
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

/* A device allocator written in a front end rarely brings copies and streams of its own: the
 * device's runtime (e.g. cuda.device) does them for any memory of that device. */
static int rt_mem_info(devmm_resource *self, size_t *f, size_t *t) {
  return devmm_mem_info(((callback *)self->ctx)->runtime, f, t);
}
static int rt_copy(devmm_resource *self, void *dst, const void *src, size_t n, devmm_stream s) {
  return devmm_copy(((callback *)self->ctx)->runtime, dst, src, n, s);
}
static int rt_memset(devmm_resource *self, void *dst, int v, size_t n, devmm_stream s) {
  return devmm_memset(((callback *)self->ctx)->runtime, dst, v, n, s);
}
static int rt_stream_wait(devmm_resource *self, devmm_stream a, devmm_stream b) {
  return devmm_stream_wait(((callback *)self->ctx)->runtime, a, b);
}
static int rt_synchronize(devmm_resource *self, devmm_stream s) {
  return devmm_synchronize(((callback *)self->ctx)->runtime, s);
}

static const devmm_resource_ops callback_runtime_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = cb_allocate,
    .deallocate = cb_deallocate,
    .mem_info = rt_mem_info,
    .copy = rt_copy,
    .memset = rt_memset,
    .stream_wait = rt_stream_wait,
    .synchronize = rt_synchronize,
    .destroy = cb_destroy,
};

int devmm_callback_resource_create_ex(devmm_callback_alloc_fn alloc, devmm_callback_free_fn free_fn,
                                      void (*destroy)(void *), void *user, devmm_device device,
                                      const char *name, unsigned flags, devmm_resource *runtime,
                                      devmm_resource **out) {
  if (out)
    *out = NULL;
  if (!alloc || !free_fn || !out)
    return devmm_set_error(DEVMM_EINVAL, "callback resource: %s is NULL",
                           !alloc     ? "allocate"
                           : !free_fn ? "free"
                                      : "out");
  if (runtime && (runtime->device.device_type != device.device_type ||
                  runtime->device.device_id != device.device_id)) {
    char want[32], have[32];
    devmm_device_format(device, want, sizeof want);
    devmm_device_format(runtime->device, have, sizeof have);
    return devmm_set_error(DEVMM_EINVAL,
                           "callback resource '%s' on %s: its runtime resource '%s' is on %s",
                           name ? name : "callback", want, runtime->name, have);
  }
  callback *c = malloc(sizeof *c);
  if (!c)
    return devmm_set_error(DEVMM_ENOMEM, "callback resource: out of host memory");
  *c = (callback){alloc, free_fn, destroy, user, NULL};
  const devmm_resource_ops *ops = runtime                                  ? &callback_runtime_ops
                                  : flags & DEVMM_RESOURCE_HOST_ACCESSIBLE ? &callback_host_ops
                                                                           : &callback_ops;
  int rc = devmm_resource_create(ops, c, device, name ? name : "callback", flags, out);
  if (rc)
    free(c);
  else
    c->runtime = devmm_resource_retain(runtime);
  return rc;
}

int devmm_callback_resource_create(devmm_callback_alloc_fn alloc, devmm_callback_free_fn free_fn,
                                   void (*destroy)(void *), void *user, devmm_device device,
                                   const char *name, unsigned flags, devmm_resource **out) {
  return devmm_callback_resource_create_ex(alloc, free_fn, destroy, user, device, name, flags, NULL,
                                           out);
}
