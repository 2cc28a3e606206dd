#include "s3stream/buffer.h"

#include <gtest/gtest.h>

#include <thread>

#include "s3stream/future.h"
#include "util/block_cache.h"

namespace s3stream {
namespace {

TEST(Buffer, AppendSliceAndShare) {
  Buffer b = Buffer::Allocate(8);
  EXPECT_TRUE(b.Append(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>("abcdef"), 6)));
  EXPECT_FALSE(b.Append(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>("xyz"), 3)));
  EXPECT_EQ(b.view(), "abcdef");
  Buffer s = b.Slice(2, 3);
  EXPECT_EQ(s.view(), "cde");
  s.data()[0] = 'C';  // slices share storage: no copy was made
  EXPECT_EQ(b.view(), "abCdef");
}

TEST(BufferPool, BlocksAtTheLimitUntilReleased) {
  BufferPool pool(100);
  Buffer a = pool.Acquire(60);
  EXPECT_FALSE(pool.TryAcquire(50).valid());
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    a = Buffer();
  });
  Buffer b = pool.Acquire(50);  // waits for the release
  releaser.join();
  EXPECT_TRUE(b.valid());
  EXPECT_LE(pool.peak(), 100u);
  EXPECT_EQ(pool.in_use(), 50u);
}

TEST(BufferPool, OversizedRequestIsGrantedWhenIdle) {
  BufferPool pool(10);
  Buffer big = pool.Acquire(1000);  // no deadlock: nothing else outstanding
  EXPECT_EQ(big.capacity(), 1000u);
}

TEST(BufferPool, BuffersMayOutliveThePool) {
  Buffer b;
  {
    BufferPool pool(10);
    b = pool.Acquire(5);
  }
  b.resize(5);  // still valid memory
  EXPECT_EQ(b.size(), 5u);
}

TEST(Future, ThenRunsOnceWhetherRegisteredBeforeOrAfter) {
  Promise<int> p;
  int before = 0, after = 0;
  p.future().Then([&](const int& v) { before = v; });
  p.Set(7);
  p.Set(8);  // ignored: first value wins
  p.future().Then([&](const int& v) { after = v; });
  EXPECT_EQ(before, 7);
  EXPECT_EQ(after, 7);
  EXPECT_EQ(p.future().Wait(), 7);
}

}  // namespace
}  // namespace s3stream

namespace s3stream::internal {
namespace {

TEST(BlockCache, LargeBlocksAreRecycled) {
  const uint8_t* first;
  {
    Buffer a = Buffer::Allocate(3 << 20);
    EXPECT_EQ(a.capacity(), size_t{3} << 20);  // the caller's size, not the class size
    first = a.data();
  }
  EXPECT_GE(CachedBlockBytes(), size_t{3} << 20);
  Buffer b = Buffer::Allocate((3 << 20) - 100);  // same size class
  EXPECT_EQ(b.data(), first);                    // no fresh pages to fault in
}

}  // namespace
}  // namespace s3stream::internal
