// Which resource served each allocation of rmm.current (plugins/rmm/rmm.cpp),
// so that a free reaches that resource even after RAPIDS installed another one
// (rmm.reinitialize()): a free must never go to a resource that did not allocate. Each
// allocation keeps a shared handle to its resource alive. Independent of RMM and CUDA (the
// Resource type is a parameter), so tests/c/test-rmm-owners.cpp checks it on any machine.
#ifndef DEVMM_RMM_OWNERS_HPP
#define DEVMM_RMM_OWNERS_HPP

#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace devmm_rmm {

template <class Resource> class owners {
public:
  // A shared handle to `current` (a copy of the resource now current): the one handed out
  // last while the resource compares equal, so equal resources share one handle.
  std::shared_ptr<Resource> intern(Resource current) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!last_ || !(*last_ == current))
      last_ = std::make_shared<Resource>(std::move(current));
    return last_;
  }
  // Remembers that `owner` allocated p.
  void add(void *p, std::shared_ptr<Resource> owner) {
    std::lock_guard<std::mutex> lock(mutex_);
    by_ptr_[p] = std::move(owner);
  }
  // The resource that allocated p (forgotten now), or nullptr if none did.
  std::shared_ptr<Resource> take(void *p) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = by_ptr_.find(p);
    if (it == by_ptr_.end())
      return nullptr;
    auto owner = std::move(it->second);
    by_ptr_.erase(it);
    return owner;
  }
  // Puts back an owner that take() returned (its free failed: the pointer is still live).
  void restore(void *p, std::shared_ptr<Resource> owner) { add(p, std::move(owner)); }
  std::size_t live() {
    std::lock_guard<std::mutex> lock(mutex_);
    return by_ptr_.size();
  }

private:
  std::mutex mutex_;
  std::shared_ptr<Resource> last_;
  std::unordered_map<void *, std::shared_ptr<Resource>> by_ptr_;
};

} // namespace devmm_rmm

#endif
