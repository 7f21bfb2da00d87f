// libdevmm-torch: PyTorch's CUDAPluggableAllocator entry points over libdevmm (ADR 11).
//
// torch.cuda.memory.CUDAPluggableAllocator("libdevmm-torch.so.0", "devmm_torch_alloc",
// "devmm_torch_free") calls these. Torch uses the pointer an allocator returns without a check
// (a NULL would become a tensor at address 0 and poison the CUDA context), so a failure must be
// a C++ exception, which C cannot throw: this file is the only C++ around libdevmm besides the
// RMM bridge. Out of memory is an std::bad_alloc carrying devmm's message (torch turns it into
// a RuntimeError with that message; RMM's torch allocator does the same); any other failure
// an std::runtime_error.
#include <devmm/error.h>
#include <devmm/ffi.h>

#include <cstddef>
#include <new>
#include <stdexcept>
#include <string>

namespace {

class out_of_memory : public std::bad_alloc {
public:
  explicit out_of_memory(std::string message) : message_(std::move(message)) {}
  const char *what() const noexcept override { return message_.c_str(); }

private:
  std::string message_;
};

} // namespace

extern "C" __attribute__((visibility("default"))) void *
devmm_torch_alloc(std::size_t size, int device, void *stream) {
  void *p = nullptr;
  int rc = devmm_torch_allocate(size, device, stream, &p);
  if (rc == DEVMM_ENOMEM)
    throw out_of_memory(std::string("devmm: ") + devmm_last_error());
  if (rc != DEVMM_OK)
    throw std::runtime_error(std::string("devmm: ") + devmm_last_error());
  return p; // NULL only for size 0, which torch accepts
}

extern "C" __attribute__((visibility("default"))) void devmm_torch_free(void *ptr, std::size_t size,
                                                                        int device, void *stream) {
  devmm_torch_deallocate(ptr, size, device, stream);
}
