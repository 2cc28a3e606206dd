#include "util/shared_arena.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "s3stream/buffer.h"
#include "util/block_cache.h"

namespace s3stream::internal {
namespace {

constexpr size_t kArena = 64 << 20;

// The arena is per process and cannot be switched off: each test runs in a child of its own.
template <class Body>
void InFreshProcess(Body body) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    body();
    _exit(::testing::Test::HasFailure() ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "failures are printed above";
}

TEST(SharedArena, OffByDefault) {
  InFreshProcess([] {
    Buffer b = Buffer::Allocate(1 << 20);
    EXPECT_EQ(SharedArenaOffset(b.data()), -1);
    EXPECT_EQ(SharedArenaCapacity(), 0u);
  });
}

TEST(SharedArena, LargeBuffersLiveWhereAnotherMappingSeesThem) {
  InFreshProcess([] {
    const int fd = EnableSharedArena(kArena);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(EnableSharedArena(1 << 20), fd);  // idempotent
    Buffer big = Buffer::Allocate(1 << 20);
    big.resize(1 << 20);
    std::memset(big.data(), 0x5a, big.size());
    const int64_t at = SharedArenaOffset(big.data());
    ASSERT_GE(at, 0);
    EXPECT_EQ(at % 4096, 0);

    // What the main process does with the descriptor: map it and read the bytes in place.
    void* other = mmap(nullptr, kArena, PROT_READ, MAP_SHARED, fd, 0);
    ASSERT_NE(other, MAP_FAILED);
    const auto* seen = static_cast<const uint8_t*>(other) + at;
    EXPECT_EQ(seen[0], 0x5a);
    EXPECT_EQ(seen[(1 << 20) - 1], 0x5a);
    munmap(other, kArena);

    Buffer small = Buffer::Allocate(100);  // below kMinCachedBlock: the heap
    EXPECT_EQ(SharedArenaOffset(small.data()), -1);
  });
}

TEST(SharedArena, BlocksAreRecycledNotReallocated) {
  InFreshProcess([] {
    ASSERT_GE(EnableSharedArena(kArena), 0);
    int64_t first = -1;
    for (int i = 0; i < 100; ++i) {
      Buffer b = Buffer::Allocate(3 << 20);
      if (i == 0) first = SharedArenaOffset(b.data());
      EXPECT_EQ(SharedArenaOffset(b.data()), first);  // the same block every time
    }
    EXPECT_LE(SharedArenaUsed(), size_t{4} << 20);
  });
}

TEST(SharedArena, FullArenaFallsBackToTheHeap) {
  InFreshProcess([] {
    ASSERT_GE(EnableSharedArena(8 << 20), 0);
    Buffer a = Buffer::Allocate(6 << 20);
    Buffer b = Buffer::Allocate(6 << 20);  // does not fit beside a
    EXPECT_GE(SharedArenaOffset(a.data()), 0);
    EXPECT_EQ(SharedArenaOffset(b.data()), -1);
  });
}

TEST(SharedArena, ForkedChildDoesNotAllocateFromItsParentsArena) {
  InFreshProcess([] {
    ASSERT_GE(EnableSharedArena(kArena), 0);
    Buffer inherited = Buffer::Allocate(1 << 20);
    ASSERT_GE(SharedArenaOffset(inherited.data()), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      Buffer mine = Buffer::Allocate(1 << 20);
      const bool ok = SharedArenaOffset(mine.data()) == -1 && SharedArenaCapacity() == 0 &&
                      EnableSharedArena(kArena) == -1;
      inherited = Buffer();  // dropped, not recycled into the child's cache
      Buffer again = Buffer::Allocate(1 << 20);
      _exit(ok && !FromArena(again.data()) ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  });
}

}  // namespace
}  // namespace s3stream::internal
