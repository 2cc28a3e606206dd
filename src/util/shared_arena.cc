#include "util/shared_arena.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <mutex>

namespace s3stream::internal {
namespace {

constexpr size_t kAlign = 4096;  // page-aligned blocks: tensors over them are aligned for any dtype

struct Arena {
  std::mutex mu;
  int fd = -1;
  std::atomic<uint8_t*> base{nullptr};
  size_t capacity = 0;
  std::atomic<size_t> next{0};
  std::atomic<bool> owned{false};  // false in a forked child: the parent allocates from it
};

Arena arena;

void DisownAfterFork() { arena.owned.store(false); }

[[maybe_unused]] const bool registered = [] {
  pthread_atfork(nullptr, nullptr, DisownAfterFork);
  return true;
}();

}  // namespace

int EnableSharedArena(size_t capacity) {
  std::lock_guard<std::mutex> lock(arena.mu);
  if (arena.owned.load()) return arena.fd;
  if (arena.fd >= 0) {
    errno = EBUSY;  // a forked child: its parent's arena is mapped here and must stay as it is
    return -1;
  }
  capacity = (capacity + kAlign - 1) / kAlign * kAlign;
  const int fd = memfd_create("s3stream-arena", MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (ftruncate(fd, static_cast<off_t>(capacity)) != 0) {
    const int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  void* base = mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  arena.fd = fd;
  arena.capacity = capacity;
  arena.base.store(static_cast<uint8_t*>(base));
  arena.owned.store(true);
  return fd;
}

size_t SharedArenaCapacity() { return arena.owned.load() ? arena.capacity : 0; }

size_t SharedArenaUsed() { return arena.owned.load() ? arena.next.load() : 0; }

int64_t SharedArenaOffset(const void* p) {
  if (!arena.owned.load() || !FromArena(p)) return -1;
  return static_cast<const uint8_t*>(p) - arena.base.load();
}

uint8_t* ArenaAllocate(size_t size) {
  if (!arena.owned.load()) return nullptr;
  size = (size + kAlign - 1) / kAlign * kAlign;
  size_t at = arena.next.load();
  do {
    if (at + size > arena.capacity) return nullptr;
  } while (!arena.next.compare_exchange_weak(at, at + size));
  return arena.base.load() + at;
}

bool FromArena(const void* p) {
  const auto* b = static_cast<const uint8_t*>(p);
  const uint8_t* base = arena.base.load();
  return base != nullptr && b >= base && b < base + arena.capacity;
}

bool ArenaOwnedHere() { return arena.owned.load(); }

}  // namespace s3stream::internal
