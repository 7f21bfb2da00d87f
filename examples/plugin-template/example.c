/* A third-party devmm plugin, built only against the installed SDK (pkg-config devmm): the
 * worked example of docs/plugins.md. It offers one resource kind, example.arena: CPU memory
 * carved from one fixed-size block with a bump pointer (reset when everything was freed) — the
 * smallest allocator that is not libc's. Options: size (default 64MiB).
 *
 * What it does not need to write, because the host does it (docs/plugins.md, "What the host
 * checks for you"): copy and memset (the resource is HOST_ACCESSIBLE), devices (cpu:0 belongs to
 * the cpu plugin: no device_count), an alignment of 0 (the host resolves it), the entry point and
 * a global for the host table (DEVMM_PLUGIN_DEFINE), option parsing (devmm_option_size). */
#include <devmm/plugin_helpers.h>

#include <pthread.h>
#include <stdlib.h>

typedef struct {
  pthread_mutex_t lock;
  char *base;
  size_t size, used, live;
} arena;

static int arena_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream stream,
                          void **out) {
  arena *a = devmm_plugin_context(self);
  *out = NULL;
  if (stream)
    return devmm_plugin_host->set_error(DEVMM_EINVAL, "example.arena: CPU memory has no streams");
  /* bytes > 0 and align a power of two: the host checked both */
  pthread_mutex_lock(&a->lock);
  size_t start = (a->used + align - 1) & ~(align - 1);
  if (start > a->size || bytes > a->size - start) {
    size_t used = a->used;
    pthread_mutex_unlock(&a->lock);
    return devmm_plugin_host->set_error(
        DEVMM_ENOMEM, "out of memory: example.arena has %zu of %zu bytes left, asked for %zu",
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
  arena *a = devmm_plugin_context(self);
  pthread_mutex_lock(&a->lock);
  if (--a->live == 0)
    a->used = 0; /* everything was freed: start over */
  pthread_mutex_unlock(&a->lock);
  return DEVMM_OK;
}

static void arena_destroy(devmm_resource *self) {
  arena *a = devmm_plugin_context(self);
  pthread_mutex_destroy(&a->lock);
  free(a->base);
  free(a);
}

static const devmm_resource_ops arena_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = arena_allocate,
    .deallocate = arena_deallocate,
    .destroy = arena_destroy,
};

static int arena_create(const devmm_host_services *h, int32_t device_id, const devmm_option *opts,
                        size_t nopts, devmm_resource **out) {
  if (device_id != 0)
    return h->set_error(DEVMM_EINVAL, "only cpu:0, not cpu:%d", (int)device_id);
  size_t size = 64u << 20;
  /* cpu:0 is the cpu plugin's: the host knows its total, for "size = 10%" */
  size_t total = devmm_device_total(h, (devmm_device){DEVMM_DEVICE_CPU, 0});
  if (devmm_option_size(h, opts, nopts, "size", total, &size) != DEVMM_OK)
    return DEVMM_EINVAL; /* "size: bad size '64 MeB': ..." */
  if (size == 0)
    return h->set_error(DEVMM_EINVAL, "size = 0: the arena needs at least one byte");
  arena *a = calloc(1, sizeof *a);
  if (!a || !(a->base = malloc(size))) {
    free(a);
    return h->set_error(DEVMM_ENOMEM, "cannot reserve %zu bytes", size);
  }
  a->size = size;
  pthread_mutex_init(&a->lock, NULL);
  char name[64];
  devmm_device cpu = {DEVMM_DEVICE_CPU, 0};
  int rc = h->resource_create(&arena_ops, a, cpu,
                              devmm_name_format(name, sizeof name, "example.arena(%zu)", size),
                              DEVMM_RESOURCE_THREAD_SAFE | DEVMM_RESOURCE_HOST_ACCESSIBLE, out);
  if (rc) {
    pthread_mutex_destroy(&a->lock);
    free(a->base);
    free(a);
  }
  return rc;
}

static const char *const arena_options[] = {"size", NULL};
static const char *const arena_help[] = {"the block's size (default 64MiB)", NULL};
static const devmm_resource_kind arena_kind = {
    .struct_size = sizeof(devmm_resource_kind),
    .name = "example.arena",
    .description = "a bump allocator over one block",
    .device_type = DEVMM_DEVICE_CPU,
    .options = arena_options,
    .create = arena_create,
    .option_help = arena_help,
};
static const devmm_resource_kind *const kinds[] = {&arena_kind};

/* No device_count/device_info: cpu:0 is the cpu plugin's, this plugin only adds a kind for it. */
static const devmm_plugin descriptor = {
    .abi_major = DEVMM_PLUGIN_ABI_MAJOR,
    .abi_minor = DEVMM_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(devmm_plugin),
    .name = "example",
    .version = "0.1.0",
    .description = "an example third-party plugin",
    .nkinds = sizeof kinds / sizeof kinds[0],
    .kinds = kinds,
};

DEVMM_PLUGIN_DEFINE(descriptor)
