// devmm-rmm: RAPIDS RMM (>= 26.06, CCCL cuda::mr resources) as devmm resources — the only C++ in
// devmm. Kinds:
//   rmm.current  forwards to RMM's current resource of the device, looked up on every call, so
//                devmm and RAPIDS share one pool (whatever rmm::mr::set_current_device_resource
//                installed)
//   rmm.pool     rmm::mr::pool_memory_resource over upstream = cuda|async|managed
//                (options initial_pool_size, maximum_pool_size)
//   rmm.arena    rmm::mr::arena_memory_resource over upstream = cuda|async|managed (arena_size)
// Without a GPU the plugin loads and reports "0 devices: <CUDA's reason>", like devmm-cuda.
#include <devmm/plugin.h>

#include <cuda/memory_resource>
#include <cuda/stream_ref>
#include <cuda_runtime_api.h>
#include <rmm/mr/arena_memory_resource.hpp>
#include <rmm/mr/cuda_async_memory_resource.hpp>
#include <rmm/mr/cuda_memory_resource.hpp>
#include <rmm/mr/managed_memory_resource.hpp>
#include <rmm/mr/per_device_resource.hpp>
#include <rmm/mr/pool_memory_resource.hpp>

#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <optional>
#include <string>

namespace {

const devmm_host_services *host;

using device_resource = cuda::mr::any_resource<cuda::mr::device_accessible>;

enum kind { CURRENT, POOL, ARENA };
const char *const kind_names[] = {"rmm.current", "rmm.pool", "rmm.arena"};

struct bridge {
  kind k;
  int device;
  std::optional<device_resource> owned; // pool/arena: the resource this bridge built
};

// Runs f with `device` current; RMM resources must be used on the device they belong to.
template <class F> auto on_device(int device, F &&f) {
  int prev = 0;
  cudaGetDevice(&prev);
  if (prev != device)
    cudaSetDevice(device);
  struct restore {
    int prev, device;
    ~restore() {
      if (prev != device)
        cudaSetDevice(prev);
    }
  } r{prev, device};
  return f();
}

int fail(const char *what, const bridge *b, const std::exception &e, int status) {
  return host->set_error(status, "%s on cuda:%d: %s failed: %s", kind_names[b->k], b->device, what,
                         e.what());
}

int br_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream stream, void **out) {
  auto *b = static_cast<bridge *>(host->resource_context(self));
  *out = nullptr;
  cuda::stream_ref s{static_cast<cudaStream_t>(stream)};
  size_t a = align ? align : 256;
  try {
    *out = on_device(b->device, [&] {
      if (b->k == CURRENT)
        return rmm::mr::get_per_device_resource_ref(rmm::cuda_device_id{b->device})
            .allocate(s, bytes, a);
      return b->owned->allocate(s, bytes, a);
    });
    return DEVMM_OK;
  } catch (const std::bad_alloc &e) {
    return fail("allocate", b, e, DEVMM_ENOMEM);
  } catch (const std::exception &e) {
    // rmm::out_of_memory derives from bad_alloc; anything else is a device error
    return fail("allocate", b, e, DEVMM_EDEVICE);
  }
}

int br_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                  devmm_stream stream) {
  auto *b = static_cast<bridge *>(host->resource_context(self));
  cuda::stream_ref s{static_cast<cudaStream_t>(stream)};
  size_t a = align ? align : 256;
  on_device(b->device, [&] {
    if (b->k == CURRENT)
      rmm::mr::get_per_device_resource_ref(rmm::cuda_device_id{b->device})
          .deallocate(s, ptr, bytes, a);
    else
      b->owned->deallocate(s, ptr, bytes, a);
    return 0;
  });
  return DEVMM_OK;
}

int br_copy(devmm_resource *self, void *dst, const void *src, size_t n, devmm_stream s) {
  auto *b = static_cast<bridge *>(host->resource_context(self));
  cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, static_cast<cudaStream_t>(s));
  return e == cudaSuccess ? DEVMM_OK
                          : host->set_error(DEVMM_EDEVICE, "%s: cudaMemcpyAsync failed: %s",
                                            kind_names[b->k], cudaGetErrorString(e));
}

int br_memset(devmm_resource *self, void *dst, int v, size_t n, devmm_stream s) {
  auto *b = static_cast<bridge *>(host->resource_context(self));
  cudaError_t e = cudaMemsetAsync(dst, v, n, static_cast<cudaStream_t>(s));
  return e == cudaSuccess ? DEVMM_OK
                          : host->set_error(DEVMM_EDEVICE, "%s: cudaMemsetAsync failed: %s",
                                            kind_names[b->k], cudaGetErrorString(e));
}

int br_synchronize(devmm_resource *self, devmm_stream s) {
  auto *b = static_cast<bridge *>(host->resource_context(self));
  cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(s));
  return e == cudaSuccess ? DEVMM_OK
                          : host->set_error(DEVMM_EDEVICE, "%s: cudaStreamSynchronize failed: %s",
                                            kind_names[b->k], cudaGetErrorString(e));
}

void br_destroy(devmm_resource *self) {
  auto *b = static_cast<bridge *>(host->resource_context(self));
  on_device(b->device, [&] {
    delete b; // the pool/arena gives its memory back on its own device
    return 0;
  });
}

devmm_resource_ops make_ops() {
  devmm_resource_ops ops{};
  ops.struct_size = sizeof(devmm_resource_ops);
  ops.allocate = br_allocate;
  ops.deallocate = br_deallocate;
  ops.copy = br_copy;
  ops.memset = br_memset;
  ops.synchronize = br_synchronize;
  ops.destroy = br_destroy;
  return ops;
}
const devmm_resource_ops ops = make_ops();

// ---------------------------------------------------------------------------- devices

int count_devices(int *n) {
  static int cached = -1;
  static cudaError_t why = cudaSuccess;
  if (cached < 0 && (why = cudaGetDeviceCount(&cached)) != cudaSuccess)
    cached = 0;
  *n = cached;
  if (why != cudaSuccess)
    return host->set_error(DEVMM_EDEVICE, "%s (%s)", cudaGetErrorString(why),
                           cudaGetErrorName(why));
  return cached ? DEVMM_OK : host->set_error(DEVMM_EDEVICE, "no CUDA device is present");
}

int device_count(size_t *count) {
  int n;
  int rc = count_devices(&n);
  *count = static_cast<size_t>(n);
  return rc;
}

// The devices belong to the cuda plugin when both are loaded; rmm enumerates them too so that
// it can serve a configuration without devmm-cuda.
int device_info(size_t index, devmm_device_info *out) {
  cudaDeviceProp p;
  cudaError_t e = cudaGetDeviceProperties(&p, static_cast<int>(index));
  if (e != cudaSuccess)
    return host->set_error(DEVMM_EDEVICE, "rmm: cudaGetDeviceProperties(%zu): %s", index,
                           cudaGetErrorString(e));
  out->device = devmm_device{DEVMM_DEVICE_CUDA, static_cast<int32_t>(index)};
  std::snprintf(out->name, sizeof out->name, "%.96s (RMM)", p.name);
  out->total_bytes = p.totalGlobalMem;
  out->free_bytes = 0;
  return DEVMM_OK;
}

// ---------------------------------------------------------------------------- factories

const char *opt(const devmm_option *o, size_t n, const char *key) {
  for (size_t i = 0; i < n; i++)
    if (std::strcmp(o[i].key, key) == 0)
      return o[i].value;
  return nullptr;
}

int create(kind k, int32_t id, const devmm_option *o, size_t n, devmm_resource **out) {
  int count;
  if (count_devices(&count) != DEVMM_OK) {
    std::string why = host->last_error();
    return host->set_error(DEVMM_EDEVICE, "%s: no cuda device %d: 0 devices: %s", kind_names[k],
                           static_cast<int>(id), why.c_str());
  }
  if (id < 0 || id >= count)
    return host->set_error(DEVMM_EINVAL, "%s: no cuda device %d (this machine has %d)",
                           kind_names[k], static_cast<int>(id), count);
  auto *b = new (std::nothrow) bridge{k, id, std::nullopt};
  if (!b)
    return host->set_error(DEVMM_ENOMEM, "%s: out of host memory", kind_names[k]);
  if (k != CURRENT) {
    const char *up = opt(o, n, "upstream");
    std::string upstream = up ? up : "async";
    size_t initial = 0, maximum = 0, arena = 0;
    const char *v;
    if ((v = opt(o, n, "initial_pool_size")) && host->parse_size(v, 0, &initial))
      return delete b, DEVMM_EINVAL;
    if ((v = opt(o, n, "maximum_pool_size")) && host->parse_size(v, 0, &maximum))
      return delete b, DEVMM_EINVAL;
    if ((v = opt(o, n, "arena_size")) && host->parse_size(v, 0, &arena))
      return delete b, DEVMM_EINVAL;
    if (upstream != "cuda" && upstream != "async" && upstream != "managed") {
      delete b;
      return host->set_error(DEVMM_EINVAL, "%s: upstream = %s: expected cuda, async or managed",
                             kind_names[k], upstream.c_str());
    }
    try {
      on_device(id, [&] {
        device_resource base = upstream == "cuda" ? device_resource{rmm::mr::cuda_memory_resource{}}
                               : upstream == "managed"
                                   ? device_resource{rmm::mr::managed_memory_resource{}}
                                   : device_resource{rmm::mr::cuda_async_memory_resource{}};
        if (k == POOL)
          b->owned.emplace(rmm::mr::pool_memory_resource{
              std::move(base), initial, maximum ? std::optional<size_t>{maximum} : std::nullopt});
        else
          b->owned.emplace(rmm::mr::arena_memory_resource{
              std::move(base), arena ? std::optional<size_t>{arena} : std::nullopt});
        return 0;
      });
    } catch (const std::exception &e) {
      delete b;
      return host->set_error(DEVMM_EDEVICE, "%s: building it on cuda:%d failed: %s", kind_names[k],
                             static_cast<int>(id), e.what());
    }
  }
  devmm_device d{DEVMM_DEVICE_CUDA, id};
  int rc = host->resource_create(&ops, b, d, kind_names[k], DEVMM_RESOURCE_THREAD_SAFE, out);
  if (rc)
    delete b;
  return rc;
}

int current_create(const devmm_host_services *, int32_t id, const devmm_option *o, size_t n,
                   devmm_resource **out) {
  return create(CURRENT, id, o, n, out);
}
int pool_create(const devmm_host_services *, int32_t id, const devmm_option *o, size_t n,
                devmm_resource **out) {
  return create(POOL, id, o, n, out);
}
int arena_create(const devmm_host_services *, int32_t id, const devmm_option *o, size_t n,
                 devmm_resource **out) {
  return create(ARENA, id, o, n, out);
}

const char *const pool_options[] = {"upstream", "initial_pool_size", "maximum_pool_size", nullptr};
const char *const arena_options[] = {"upstream", "arena_size", nullptr};

const devmm_resource_kind kinds[] = {
    {sizeof(devmm_resource_kind), "rmm.current", "RMM's current device resource (shared pool)",
     DEVMM_DEVICE_CUDA, nullptr, current_create},
    {sizeof(devmm_resource_kind), "rmm.pool", "rmm::mr::pool_memory_resource", DEVMM_DEVICE_CUDA,
     pool_options, pool_create},
    {sizeof(devmm_resource_kind), "rmm.arena", "rmm::mr::arena_memory_resource", DEVMM_DEVICE_CUDA,
     arena_options, arena_create},
};

const devmm_plugin descriptor = {
    DEVMM_PLUGIN_ABI_MAJOR,
    DEVMM_PLUGIN_ABI_MINOR,
    sizeof(devmm_plugin),
    "rmm",
    "1.0.0",
    "RAPIDS RMM resources (CCCL cuda::mr)",
    device_count,
    device_info,
    3,
    kinds,
    nullptr,
};

} // namespace

extern "C" DEVMM_PLUGIN_EXPORT const devmm_plugin *
devmm_plugin_entry(uint32_t major, uint32_t, const devmm_host_services *h) {
  if (major != DEVMM_PLUGIN_ABI_MAJOR || !h || h->struct_size < sizeof(devmm_host_services))
    return nullptr;
  host = h;
  return &descriptor;
}
