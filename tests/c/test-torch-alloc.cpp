// libdevmm-torch's contract with PyTorch's CUDAPluggableAllocator (ADR 11): torch uses the
// pointer its allocator returns unchecked, so a failure must throw, never return NULL. Out of
// memory is an std::bad_alloc carrying devmm's message; other failures an std::runtime_error.
// Runs over a CPU resource standing in for cuda:N (the registry is keyed by device only).
#include <devmm/devmm.h>

#include "expect.hpp"

#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

extern "C" void *devmm_torch_alloc(std::size_t size, int device, void *stream);
extern "C" void devmm_torch_free(void *ptr, std::size_t size, int device, void *stream);

template <class E> static std::string thrown(std::size_t size, int device) {
  try {
    void *p = devmm_torch_alloc(size, device, nullptr);
    std::fprintf(stderr, "devmm_torch_alloc(%zu, %d) returned %p instead of throwing\n", size,
                 device, p);
    failures++;
  } catch (const E &e) {
    return e.what();
  } catch (const std::exception &e) {
    std::fprintf(stderr, "wrong exception type: %s\n", e.what());
    failures++;
  }
  return "";
}

int main() {
  devmm_resource *cpu, *lim, *prev = nullptr;
  if (devmm_resource_create_kind("cpu.malloc", 0, nullptr, 0, &cpu) ||
      devmm_limiting_adaptor_create(cpu, 1 << 20, &lim)) {
    std::fprintf(stderr, "setup: %s\n", devmm_last_error());
    return 1;
  }
  devmm_set_current_resource(devmm_device{DEVMM_DEVICE_CUDA, 2}, lim, &prev);
  void *p = devmm_torch_alloc(4096, 2, nullptr);
  EXPECT(p != nullptr);
  std::memset(p, 1, 4096);
  EXPECT(devmm_torch_alloc(0, 2, nullptr) == nullptr); // torch's empty tensors
  std::string oom = thrown<std::bad_alloc>(2 << 20, 2);
  EXPECT(oom.find("devmm: torch allocation of 2097152 bytes on cuda:2: out of memory: ") == 0);
  EXPECT(oom.find("would exceed its limit of 1048576 bytes") != std::string::npos);
  std::string range = thrown<std::runtime_error>(16, 99);
  EXPECT(range.find("device 99 out of range") != std::string::npos);
  std::string none = thrown<std::runtime_error>(16, 5);
  EXPECT(none.find("no current resource for device cuda:5") != std::string::npos);
  devmm_torch_free(p, 4096, 2, nullptr);
  size_t used = 1, limit = 0;
  devmm_limiting_get(lim, &used, &limit);
  EXPECT(used == 0);
  devmm_resource_release(prev);
  devmm_resource_release(lim);
  devmm_resource_release(cpu);
  return report();
}
