// BufferPool: per-size-class free lists.
#include "param_server/buffer_pool.h"

#include <algorithm>
#include <cstdlib>
#include <new>

namespace adam::ps {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t kMaxFreeBytesPerClass = size_t{64} << 20;

void* AllocateAligned(size_t bytes) {
  void* p = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

int BufferPool::ClassOf(size_t bytes) {
  if (bytes > kMaxBytes) return -1;
  int cls = 0;
  while ((kMinBytes << cls) < bytes) ++cls;
  return cls;
}

BufferPool::Buffer BufferPool::Get(size_t bytes) {
  Buffer b;
  if (bytes == 0) return b;
  b.pool_ = this;
  b.cls_ = ClassOf(bytes);
  if (b.cls_ < 0) {
    allocations_.fetch_add(1, std::memory_order_relaxed);
    b.capacity_ = bytes;
    b.data_ = AllocateAligned(bytes);
    return b;
  }
  b.capacity_ = kMinBytes << b.cls_;
  FreeList& fl = free_[size_t(b.cls_)];
  {
    MutexLock lock(fl.mu);
    if (!fl.buffers.empty()) {
      b.data_ = fl.buffers.back();
      fl.buffers.pop_back();
    }
  }
  if (b.data_ != nullptr) {
    reuses_.fetch_add(1, std::memory_order_relaxed);
  } else {
    allocations_.fetch_add(1, std::memory_order_relaxed);
    b.data_ = AllocateAligned(b.capacity_);
  }
  return b;
}

void BufferPool::Put(int cls, void* p) {
  if (cls >= 0) {
    FreeList& fl = free_[size_t(cls)];
    const size_t max_free = std::max<size_t>(1, kMaxFreeBytesPerClass / (kMinBytes << cls));
    MutexLock lock(fl.mu);
    if (fl.buffers.size() < max_free) {
      fl.buffers.push_back(p);
      return;
    }
  }
  std::free(p);
}

BufferPool::~BufferPool() {
  for (auto& fl : free_)
    for (void* p : fl.buffers) std::free(p);
}

BufferPool::Buffer& BufferPool::Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    Release();
    pool_ = o.pool_;
    cls_ = o.cls_;
    data_ = o.data_;
    capacity_ = o.capacity_;
    o.pool_ = nullptr;
    o.data_ = nullptr;
    o.capacity_ = 0;
  }
  return *this;
}

void BufferPool::Buffer::Release() {
  if (data_ != nullptr) pool_->Put(cls_, data_);
  data_ = nullptr;
  pool_ = nullptr;
  capacity_ = 0;
}

}  // namespace adam::ps
