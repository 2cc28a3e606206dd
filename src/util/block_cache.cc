#include "util/block_cache.h"

#include "util/shared_arena.h"

#include <pthread.h>
#include <sys/mman.h>

#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace s3stream::internal {
namespace {

// Size classes. Up to 1 MiB: four per power of two, so a block wastes at most a quarter of its
// size. From 1 MiB: powers of two. A large block's unused tail is never written, so its pages are
// never faulted in; what the coarse classes buy is reuse: a reader's ranges of 5.8-7 MB all share
// the 8 MiB class instead of spreading over three classes, each needing its own blocks (measured:
// a fresh DataLoader worker faulted in ~40% more memory, and zeroing it was its top CPU cost).
// Callers keep n <= kMaxBlock (AcquireBlock refuses more), so the doubling cannot overflow.
size_t ClassSize(size_t n) {
  size_t power = 1;
  while (power < n) power *= 2;
  if (power == n || n >= (size_t{1} << 20)) return power;
  const size_t step = power / 8;  // n is in (power / 2, power): quarters of power / 2
  return (n + step - 1) / step * step;
}

// Large blocks are mapped directly rather than taken from malloc: glibc raises its mmap threshold
// after such frees and would then keep hundreds of MB of freed readers' memory in its heap (seen
// with 200 readers opened and dropped). A mapping given back is memory given back.
// Under AddressSanitizer they stay on the heap, where overflows are caught.
#if defined(__SANITIZE_ADDRESS__)
uint8_t* MapBlock(size_t size) { return new (std::nothrow) uint8_t[size]; }
void UnmapBlock(uint8_t* block, size_t) { delete[] block; }
#else
uint8_t* MapBlock(size_t size) {
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}
void UnmapBlock(uint8_t* block, size_t size) { ::munmap(block, size); }
#endif

size_t CacheLimit() {
  static const size_t limit = [] {
    const char* v = std::getenv("S3STREAM_BUFFER_CACHE_BYTES");
    return v ? static_cast<size_t>(std::strtoull(v, nullptr, 10)) : size_t{256} << 20;
  }();
  return limit;
}

struct Cache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<uint8_t*>> free_blocks;  // by class size
  size_t cached = 0;
};

Cache* cache = new Cache;  // never destroyed: blocks may be released during static destruction

void ResetAfterFork() {
  // The old cache's lock may be held by a thread that does not exist here: start over (its blocks
  // stay allocated; they are the parent's anyway).
  cache = new Cache;
}

[[maybe_unused]] const bool registered = [] {
  pthread_atfork(nullptr, nullptr, ResetAfterFork);
  return true;
}();

}  // namespace

uint8_t* AcquireBlock(size_t size, size_t* block_size) {
  if (size > kMaxBlock) return nullptr;
  if (size < kMinCachedBlock) {
    *block_size = size;
    return new (std::nothrow) uint8_t[size];
  }
  const size_t cls = ClassSize(size);
  *block_size = cls;
  {
    std::lock_guard<std::mutex> lock(cache->mu);
    auto it = cache->free_blocks.find(cls);
    if (it != cache->free_blocks.end() && !it->second.empty()) {
      uint8_t* block = it->second.back();
      it->second.pop_back();
      if (!FromArena(block)) cache->cached -= cls;
      return block;
    }
  }
  if (uint8_t* block = ArenaAllocate(cls)) return block;
  return MapBlock(cls);
}

void ReleaseBlock(uint8_t* block, size_t block_size) {
  if (block_size >= kMinCachedBlock && FromArena(block)) {
    // Arena space is never returned, so its blocks are always kept for reuse (the arena bounds
    // them); a forked child drops the blocks it inherited: they are its parent's to reuse.
    if (ArenaOwnedHere()) {
      std::lock_guard<std::mutex> lock(cache->mu);
      cache->free_blocks[block_size].push_back(block);
    }
    return;
  }
  if (block_size >= kMinCachedBlock) {
    {
      std::lock_guard<std::mutex> lock(cache->mu);
      if (cache->cached + block_size <= CacheLimit()) {
        cache->free_blocks[block_size].push_back(block);
        cache->cached += block_size;
        return;
      }
    }
    UnmapBlock(block, block_size);  // back to the system at once, not into the allocator's heap
    return;
  }
  delete[] block;
}

size_t CachedBlockBytes() {
  std::lock_guard<std::mutex> lock(cache->mu);
  return cache->cached;
}

}  // namespace s3stream::internal
