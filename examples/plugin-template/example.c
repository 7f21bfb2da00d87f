/* A third-party devmm plugin, built only against the installed SDK (pkg-config devmm).
 * It offers one resource kind, example.arena: CPU memory carved from one fixed-size block
 * with a bump pointer (freed all at once when the resource goes) — the smallest allocator
 * that is not libc's, to show the whole path a vendor takes. Options: size (default 64MiB). */
#include <devmm/plugin.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const devmm_host_services *host;

typedef struct {
  pthread_mutex_t lock;
  char *base;
  size_t size, used, live;
} arena;

static int arena_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream stream,
                          void **out) {
  arena *a = host->resource_context(self);
  if (stream)
    return host->set_error(DEVMM_EINVAL, "example.arena: CPU memory has no streams");
  if (align < 16)
    align = 16;
  pthread_mutex_lock(&a->lock);
  size_t start = (a->used + align - 1) & ~(align - 1);
  if (start > a->size || bytes > a->size - start) {
    size_t used = a->used;
    pthread_mutex_unlock(&a->lock);
    *out = NULL;
    return host->set_error(DEVMM_ENOMEM,
                           "out of memory: example.arena has %zu of %zu bytes left, asked for %zu",
                           a->size - used, a->size, bytes);
  }
  a->used = start + bytes;
  a->live++;
  pthread_mutex_unlock(&a->lock);
  *out = a->base + start;
  return DEVMM_OK;
}

static int arena_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                            devmm_stream stream) {
  (void)ptr, (void)bytes, (void)align, (void)stream;
  arena *a = host->resource_context(self);
  pthread_mutex_lock(&a->lock);
  if (--a->live == 0)
    a->used = 0; /* everything was freed: start over */
  pthread_mutex_unlock(&a->lock);
  return DEVMM_OK;
}

static int arena_memset(devmm_resource *self, void *dst, int v, size_t n, devmm_stream s) {
  (void)self, (void)s;
  memset(dst, v, n);
  return DEVMM_OK;
}

static int arena_copy(devmm_resource *self, void *dst, const void *src, size_t n, devmm_stream s) {
  (void)self, (void)s;
  memmove(dst, src, n);
  return DEVMM_OK;
}

static void arena_destroy(devmm_resource *self) {
  arena *a = host->resource_context(self);
  pthread_mutex_destroy(&a->lock);
  free(a->base);
  free(a);
}

static const devmm_resource_ops arena_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = arena_allocate,
    .deallocate = arena_deallocate,
    .copy = arena_copy,
    .memset = arena_memset,
    .destroy = arena_destroy,
};

static int arena_create(const devmm_host_services *h, int32_t device_id, const devmm_option *opts,
                        size_t nopts, devmm_resource **out) {
  if (device_id != 0)
    return h->set_error(DEVMM_EINVAL, "example.arena: only cpu:0");
  size_t size = 64u << 20;
  for (size_t i = 0; i < nopts; i++)
    if (strcmp(opts[i].key, "size") == 0 && h->parse_size(opts[i].value, 0, &size))
      return DEVMM_EINVAL;
  arena *a = calloc(1, sizeof *a);
  if (!a || !(a->base = malloc(size))) {
    free(a);
    return h->set_error(DEVMM_ENOMEM, "example.arena: cannot reserve %zu bytes", size);
  }
  a->size = size;
  pthread_mutex_init(&a->lock, NULL);
  devmm_device cpu = {DEVMM_DEVICE_CPU, 0};
  int rc = h->resource_create(&arena_ops, a, cpu, "example.arena",
                              DEVMM_RESOURCE_THREAD_SAFE | DEVMM_RESOURCE_HOST_ACCESSIBLE, out);
  if (rc) {
    pthread_mutex_destroy(&a->lock);
    free(a->base);
    free(a);
  }
  return rc;
}

/* This plugin adds a kind for an existing device (cpu:0, enumerated by the cpu plugin), so it
 * enumerates no devices of its own. */
static int device_count(size_t *n) {
  *n = 0;
  return DEVMM_OK;
}

static int device_info(size_t i, devmm_device_info *out) {
  (void)i, (void)out;
  return host->set_error(DEVMM_EINVAL, "example: no devices");
}

static const char *const arena_options[] = {"size", NULL};
static const devmm_resource_kind kinds[] = {
    {sizeof(devmm_resource_kind), "example.arena", "a bump allocator over one block",
     DEVMM_DEVICE_CPU, arena_options, arena_create},
};

static const devmm_plugin descriptor = {
    DEVMM_PLUGIN_ABI_MAJOR,
    DEVMM_PLUGIN_ABI_MINOR,
    sizeof(devmm_plugin),
    "example",
    "0.1.0",
    "an example third-party plugin",
    device_count,
    device_info,
    1,
    kinds,
    NULL,
};

DEVMM_PLUGIN_EXPORT const devmm_plugin *devmm_plugin_entry(uint32_t major, uint32_t minor,
                                                           const devmm_host_services *h) {
  (void)minor;
  if (major != DEVMM_PLUGIN_ABI_MAJOR)
    return NULL;
  host = h;
  return &descriptor;
}
