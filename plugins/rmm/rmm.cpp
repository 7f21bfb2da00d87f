// devmm-rmm: RAPIDS RMM (>= 26.06, CCCL cuda::mr resources) as devmm resources — with
// libdevmm-torch, the only C++ in devmm. Kinds:
//   rmm.current  allocates from RMM's current resource of the device at each allocation, so
//                devmm and RAPIDS share one pool (whatever rmm::mr::set_current_device_resource
//                installed), and frees to the resource that allocated (kept alive until then),
//                even after RAPIDS installed another one. Not flagged thread-safe: the installed
//                resource may not be (stack a thread_safe adaptor if it is shared by threads).
//   rmm.pool     rmm::mr::pool_memory_resource over upstream = cuda|async|managed
//                (options initial_pool_size, maximum_pool_size)
//   rmm.arena    rmm::mr::arena_memory_resource over upstream = cuda|async|managed (arena_size)
// Every CUDA call runs with the resource's device current (a NULL stream is that device's);
// stream_wait records an event (one per resource) and makes the consumer's stream wait.
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
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>

#include "owners.hpp"

namespace {

const devmm_host_services *host;

using device_resource = cuda::mr::any_resource<cuda::mr::device_accessible>;

enum kind { CURRENT, POOL, ARENA };
const char *const kind_names[] = {"rmm.current", "rmm.pool", "rmm.arena"};

struct bridge {
  kind k;
  int device;
  std::optional<device_resource> owned;   // pool/arena: the resource this bridge built
  devmm_rmm::owners<device_resource> who; // rmm.current: which resource served each pointer
  std::mutex event_lock;
  cudaEvent_t event = nullptr; // stream_wait's event, created on first use
};

// A failed device switch, as a C++ exception for on_device's callers.
struct device_switch_error : std::runtime_error {
  explicit device_switch_error(cudaError_t e)
      : std::runtime_error(std::string("cudaSetDevice failed: ") + cudaGetErrorString(e)) {}
};

// Runs f with `device` current; RMM resources must be used on the device they belong to, and
// a NULL stream then means that device's default stream. Throws device_switch_error when the
// device cannot be made current.
template <class F> auto on_device(int device, F &&f) {
  int prev = 0;
  cudaError_t e = cudaGetDevice(&prev);
  if (e == cudaSuccess && prev != device)
    e = cudaSetDevice(device);
  if (e != cudaSuccess)
    throw device_switch_error(e);
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

// An owning copy of RMM's current resource of a device. RMM's public API hands out only a
// non-owning reference; the map behind it holds the owning copies (RMM >= 26.06; the wheel is
// pinned to the version the bridge was built against).
device_resource current_resource(int device) {
  rmm::mr::get_per_device_resource_ref(rmm::cuda_device_id{device}); // makes sure one is set
  std::lock_guard<std::mutex> lock{rmm::mr::detail::ref_map_lock()};
  return rmm::mr::detail::get_ref_map().at(device);
}

int br_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream stream, void **out) {
  auto *b = static_cast<bridge *>(host->resource_context(self));
  *out = nullptr;
  cuda::stream_ref s{static_cast<cudaStream_t>(stream)};
  size_t a = align ? align : 256;
  try {
    *out = on_device(b->device, [&] {
      if (b->k != CURRENT)
        return b->owned->allocate(s, bytes, a);
      auto owner = b->who.intern(current_resource(b->device));
      void *p = owner->allocate(s, bytes, a);
      try {
        b->who.add(p, std::move(owner));
      } catch (...) {
        owner->deallocate(s, p, bytes, a);
        throw;
      }
      return p;
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
  std::shared_ptr<device_resource> owner;
  if (b->k == CURRENT && !(owner = b->who.take(ptr)))
    return host->set_error(DEVMM_EINVAL,
                           "%s on cuda:%d: free of %p (%zu bytes), which it did not "
                           "allocate",
                           kind_names[b->k], b->device, ptr, bytes);
  try {
    on_device(b->device, [&] {
      if (owner)
        owner->deallocate(s, ptr, bytes, a); // the resource that allocated, even if replaced
      else
        b->owned->deallocate(s, ptr, bytes, a);
      return 0;
    });
    return DEVMM_OK;
  } catch (const std::exception &e) {
    if (owner)
      b->who.restore(ptr, std::move(owner));
    return fail("deallocate", b, e, DEVMM_EDEVICE);
  }
}

// Runs a CUDA call on the bridge's device; a failure (or a failed switch) sets the error.
template <class F> int cuda_call(const bridge *b, const char *call, F &&f) {
  cudaError_t e;
  try {
    e = on_device(b->device, f);
  } catch (const std::exception &x) {
    return fail(call, b, x, DEVMM_EDEVICE);
  }
  return e == cudaSuccess
             ? DEVMM_OK
             : host->set_error(DEVMM_EDEVICE, "%s on cuda:%d: %s failed: %s (%s)", kind_names[b->k],
                               b->device, call, cudaGetErrorString(e), cudaGetErrorName(e));
}

int br_copy(devmm_resource *self, void *dst, const void *src, size_t n, devmm_stream s) {
  auto *b = static_cast<bridge *>(host->resource_context(self));
  return cuda_call(b, "cudaMemcpyAsync", [&] {
    return cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, static_cast<cudaStream_t>(s));
  });
}

int br_memset(devmm_resource *self, void *dst, int v, size_t n, devmm_stream s) {
  auto *b = static_cast<bridge *>(host->resource_context(self));
  return cuda_call(b, "cudaMemsetAsync",
                   [&] { return cudaMemsetAsync(dst, v, n, static_cast<cudaStream_t>(s)); });
}

int br_synchronize(devmm_resource *self, devmm_stream s) {
  auto *b = static_cast<bridge *>(host->resource_context(self));
  if (s == DEVMM_STREAM_ALL)
    return cuda_call(b, "cudaDeviceSynchronize", [] { return cudaDeviceSynchronize(); });
  return cuda_call(b, "cudaStreamSynchronize",
                   [&] { return cudaStreamSynchronize(static_cast<cudaStream_t>(s)); });
}

// Work later queued on `waiter` waits for work already on `waitee` (the buffer's stream).
int br_stream_wait(devmm_resource *self, devmm_stream waiter, devmm_stream waitee) {
  auto *b = static_cast<bridge *>(host->resource_context(self));
  auto legacy = [](devmm_stream x) {
    return x == static_cast<devmm_stream>(cudaStreamLegacy) ? nullptr : x;
  };
  if (legacy(waiter) == legacy(waitee))
    return DEVMM_OK;
  std::lock_guard<std::mutex> lock(b->event_lock);
  return cuda_call(b, "stream_wait (cudaEventRecord, cudaStreamWaitEvent)", [&] {
    cudaError_t e = cudaSuccess;
    if (!b->event &&
        (e = cudaEventCreateWithFlags(&b->event, cudaEventDisableTiming)) != cudaSuccess)
      b->event = nullptr;
    if (e == cudaSuccess) // the wait captures the record: the event may be recorded again
      e = cudaEventRecord(b->event, static_cast<cudaStream_t>(waitee));
    if (e == cudaSuccess)
      e = cudaStreamWaitEvent(static_cast<cudaStream_t>(waiter), b->event, 0);
    return e;
  });
}

void br_destroy(devmm_resource *self) {
  auto *b = static_cast<bridge *>(host->resource_context(self));
  try {
    on_device(b->device, [&] {
      if (b->event)
        cudaEventDestroy(b->event);
      delete b; // the pool/arena gives its memory back on its own device
      return 0;
    });
  } catch (const std::exception &e) {
    host->log(DEVMM_LOG_ERROR, "rmm", "%s on cuda:%d: destroyed off its device (%s)",
              kind_names[b->k], b->device, e.what());
    delete b;
  }
}

devmm_resource_ops make_ops() {
  devmm_resource_ops ops{};
  ops.struct_size = sizeof(devmm_resource_ops);
  ops.allocate = br_allocate;
  ops.deallocate = br_deallocate;
  ops.copy = br_copy;
  ops.memset = br_memset;
  ops.synchronize = br_synchronize;
  ops.stream_wait = br_stream_wait;
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
  auto *b = new (std::nothrow) bridge{};
  if (!b)
    return host->set_error(DEVMM_ENOMEM, "%s: out of host memory", kind_names[k]);
  b->k = k;
  b->device = id;
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
  // RMM's pool and arena lock internally; the resource rmm.current finds may be anything
  unsigned flags = k == CURRENT ? 0u : static_cast<unsigned>(DEVMM_RESOURCE_THREAD_SAFE);
  int rc = host->resource_create(&ops, b, d, kind_names[k], flags, out);
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

const devmm_resource_kind current_kind = {
    .struct_size = sizeof(devmm_resource_kind),
    .name = "rmm.current",
    .description = "RMM's current device resource (shared pool)",
    .device_type = DEVMM_DEVICE_CUDA,
    .options = nullptr,
    .create = current_create,
    .option_help = nullptr,
};
const devmm_resource_kind pool_kind = {
    .struct_size = sizeof(devmm_resource_kind),
    .name = "rmm.pool",
    .description = "rmm::mr::pool_memory_resource",
    .device_type = DEVMM_DEVICE_CUDA,
    .options = pool_options,
    .create = pool_create,
    .option_help = nullptr,
};
const devmm_resource_kind arena_kind = {
    .struct_size = sizeof(devmm_resource_kind),
    .name = "rmm.arena",
    .description = "rmm::mr::arena_memory_resource",
    .device_type = DEVMM_DEVICE_CUDA,
    .options = arena_options,
    .create = arena_create,
    .option_help = nullptr,
};
const devmm_resource_kind *const kinds[] = {&current_kind, &pool_kind, &arena_kind};

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
    nullptr,
    nullptr,
    DEVMM_DEVICE_CUDA, // lazy_device_type: counting CUDA devices initialises CUDA (ADR 38)
};

} // namespace

extern "C" DEVMM_PLUGIN_EXPORT const devmm_plugin *
devmm_plugin_entry(uint32_t major, uint32_t, const devmm_host_services *h) {
  if (major != DEVMM_PLUGIN_ABI_MAJOR || !h || h->struct_size < sizeof(devmm_host_services))
    return nullptr;
  host = h;
  return &descriptor;
}
