#include "param_server/buffer_pool.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace adam::ps {
namespace {

TEST(BufferPool, ReusesBuffersOfEachPowerOfTwoClass) {
  BufferPool pool;
  EXPECT_EQ(BufferPool::ClassOf(1), 0);
  EXPECT_EQ(BufferPool::ClassOf(4096), 0);
  EXPECT_EQ(BufferPool::ClassOf(4097), 1);
  EXPECT_EQ(BufferPool::ClassOf(32 << 20), 13);
  EXPECT_EQ(BufferPool::ClassOf((32 << 20) + 1), -1);
  void* first = nullptr;
  {
    auto b = pool.Get(1 << 20);
    EXPECT_EQ(b.capacity(), size_t(1) << 20);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
    first = b.data();
  }
  auto again = pool.Get(700000);  // same class: the buffer comes back
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(pool.allocations(), 1u);
  EXPECT_EQ(pool.reuses(), 1u);
  auto big = pool.Get((32 << 20) + 1);  // beyond the pool: straight from the allocator
  EXPECT_EQ(pool.allocations(), 2u);
}

}  // namespace
}  // namespace adam::ps
