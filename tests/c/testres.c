#include "testres.h"

#include <stdlib.h>
#include <string.h>

static int t_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream stream,
                      void **out) {
  (void)stream;
  testres *s = devmm_resource_context(self);
  long n = atomic_fetch_add(&s->allocs, 1) + 1;
  long fa = atomic_load(&s->fail_at), ff = atomic_load(&s->fail_from);
  if ((fa && n == fa) || (ff && n >= ff)) {
    atomic_fetch_sub(&s->allocs, 1);
    *out = NULL;
    return devmm_set_error(DEVMM_ENOMEM, "test.malloc: injected failure of allocation %ld", n);
  }
  void *p = NULL;
  if (bytes > ((size_t)1 << 46)) { /* more than any machine has: fail as malloc would, without
                                      handing malloc a value valgrind calls fishy */
    atomic_fetch_sub(&s->allocs, 1);
    *out = NULL;
    return devmm_set_error(DEVMM_ENOMEM, "test.malloc: %zu bytes is more than any machine has",
                           bytes);
  }
  if (align > 16) {
    if (posix_memalign(&p, align, bytes))
      p = NULL;
  } else {
    p = malloc(bytes);
  }
  if (!p) {
    atomic_fetch_sub(&s->allocs, 1);
    *out = NULL;
    return devmm_set_error(DEVMM_ENOMEM, "test.malloc: malloc(%zu) failed", bytes);
  }
  atomic_fetch_add(&s->live_bytes, (long)bytes);
  *out = p;
  return DEVMM_OK;
}

static int t_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                        devmm_stream stream) {
  (void)align;
  (void)stream;
  testres *s = devmm_resource_context(self);
  atomic_fetch_add(&s->frees, 1);
  atomic_fetch_sub(&s->live_bytes, (long)bytes);
  free(ptr);
  return DEVMM_OK;
}

static int t_memset(devmm_resource *self, void *dst, int v, size_t n, devmm_stream s) {
  (void)self;
  (void)s;
  memset(dst, v, n);
  return DEVMM_OK;
}

static int t_copy(devmm_resource *self, void *d, const void *src, size_t n, devmm_stream s) {
  (void)self;
  (void)s;
  memcpy(d, src, n);
  return DEVMM_OK;
}

static void t_destroy(devmm_resource *self) {
  testres *s = devmm_resource_context(self);
  if (s->destroyed)
    *s->destroyed = 1;
  free(s);
}

static const devmm_resource_ops ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = t_allocate,
    .deallocate = t_deallocate,
    .copy = t_copy,
    .memset = t_memset,
    .destroy = t_destroy,
};

devmm_resource *testres_create(testres **state) {
  testres *s = calloc(1, sizeof *s);
  devmm_resource *r = NULL;
  devmm_device cpu = {DEVMM_DEVICE_CPU, 0};
  if (devmm_resource_create(&ops, s, cpu, "test.malloc",
                            DEVMM_RESOURCE_THREAD_SAFE | DEVMM_RESOURCE_HOST_ACCESSIBLE,
                            &r) != DEVMM_OK) {
    free(s);
    return NULL;
  }
  if (state)
    *state = s;
  return r;
}
