// BufferPool: reusable 64-byte-aligned buffers in power-of-two sizes from 4 KiB to 32 MiB.
//
// The parameter server's paths that need scratch memory per request (unaligned update payloads,
// checkpoint snapshots and their compressed form) take it from here, so after warm-up they do
// not call the general allocator. A request above 32 MiB is served by the allocator directly
// and counted. Each size class keeps at most 64 MiB of free buffers. Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/mutex.h"

namespace adam::ps {

class BufferPool {
 public:
  static constexpr size_t kMinBytes = size_t{4} << 10;
  static constexpr size_t kMaxBytes = size_t{32} << 20;
  static constexpr int kClasses = 14;  // 4 KiB << 0..13

  class Buffer {
   public:
    Buffer() = default;
    Buffer(Buffer&& o) noexcept { *this = std::move(o); }
    Buffer& operator=(Buffer&& o) noexcept;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    ~Buffer() { Release(); }

    void* data() const { return data_; }
    template <typename T>
    T* as() const {
      return static_cast<T*>(data_);
    }
    size_t capacity() const { return capacity_; }  // bytes, >= what was asked for
    explicit operator bool() const { return data_ != nullptr; }

   private:
    friend class BufferPool;
    void Release();
    BufferPool* pool_ = nullptr;
    int cls_ = -1;  // -1: from the allocator directly
    void* data_ = nullptr;
    size_t capacity_ = 0;
  };

  BufferPool() = default;
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of at least `bytes` (an empty buffer for 0).
  Buffer Get(size_t bytes);

  // Calls to the general allocator so far (misses and oversized requests).
  uint64_t allocations() const { return allocations_.load(std::memory_order_relaxed); }
  // Requests served from a free list.
  uint64_t reuses() const { return reuses_.load(std::memory_order_relaxed); }

  // The size class of `bytes` (0 for <= 4 KiB), or -1 above kMaxBytes.
  static int ClassOf(size_t bytes);

 private:
  void Put(int cls, void* p);
  struct FreeList {
    Mutex mu;
    std::vector<void*> buffers ABSL_GUARDED_BY(mu);
  };
  std::array<FreeList, kClasses> free_;
  std::atomic<uint64_t> allocations_{0}, reuses_{0};  // counters only: relaxed
};

}  // namespace adam::ps
