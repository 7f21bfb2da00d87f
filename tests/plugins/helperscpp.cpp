// A C++ plugin written with <devmm/plugin_helpers.h> (suite plugins:
// plugin_helpers_two_files_and_cpp): DEVMM_PLUGIN_DEFINE must export the entry unmangled. Kind
// helperscpp.heap on cpu:0; built as devmm-helperscpp.so.
#include <devmm/plugin_helpers.h>

#include <cstdlib>
#include <new>

namespace {

struct heap {
  size_t size = 4096;
};

int heap_alloc(devmm_resource *self, size_t b, size_t a, devmm_stream, void **out) noexcept {
  auto *h = static_cast<heap *>(devmm_plugin_context(self));
  if (b > h->size)
    return devmm_plugin_host->set_error(DEVMM_ENOMEM, "%zu bytes is over the size %zu", b, h->size);
  return posix_memalign(out, a < sizeof(void *) ? sizeof(void *) : a, b) == 0
             ? DEVMM_OK
             : devmm_plugin_host->set_error(DEVMM_ENOMEM, "posix_memalign failed");
}
int heap_free(devmm_resource *, void *p, size_t, size_t, devmm_stream) noexcept {
  std::free(p);
  return DEVMM_OK;
}
void heap_destroy(devmm_resource *self) noexcept {
  delete static_cast<heap *>(devmm_plugin_context(self));
}

devmm_resource_ops make_ops() {
  devmm_resource_ops ops{};
  ops.struct_size = sizeof ops;
  ops.allocate = heap_alloc;
  ops.deallocate = heap_free;
  ops.destroy = heap_destroy;
  return ops;
}
const devmm_resource_ops heap_ops = make_ops();

int heap_create(const devmm_host_services *h, int32_t, const devmm_option *o, size_t n,
                devmm_resource **out) noexcept {
  auto *st = new (std::nothrow) heap;
  if (!st)
    return h->set_error(DEVMM_ENOMEM, "out of memory");
  if (devmm_option_size(h, o, n, "size", 0, &st->size)) {
    delete st;
    return DEVMM_EINVAL;
  }
  int rc = h->resource_create(&heap_ops, st, devmm_device{DEVMM_DEVICE_CPU, 0}, "helperscpp.heap",
                              DEVMM_RESOURCE_THREAD_SAFE | DEVMM_RESOURCE_HOST_ACCESSIBLE, out);
  if (rc)
    delete st;
  return rc;
}

const char *const heap_options[] = {"size", nullptr};
devmm_resource_kind make_kind() {
  devmm_resource_kind k{};
  k.struct_size = sizeof k;
  k.name = "helperscpp.heap";
  k.description = "a C++ plugin";
  k.device_type = DEVMM_DEVICE_CPU;
  k.options = heap_options;
  k.create = heap_create;
  return k;
}
const devmm_resource_kind heap_kind = make_kind();
const devmm_resource_kind *const kinds[] = {&heap_kind};
devmm_plugin make_descriptor() {
  devmm_plugin d{};
  d.abi_major = DEVMM_PLUGIN_ABI_MAJOR;
  d.abi_minor = DEVMM_PLUGIN_ABI_MINOR;
  d.struct_size = sizeof d;
  d.name = "helperscpp";
  d.version = "0.0.1";
  d.description = "C++ with plugin_helpers.h";
  d.nkinds = 1;
  d.kinds = kinds;
  return d;
}
const devmm_plugin descriptor = make_descriptor();

} // namespace

DEVMM_PLUGIN_DEFINE(descriptor)
