// SharedArena: large blocks in memory another process can map (a memfd), so a DataLoader worker
// can hand the training loop the bytes it downloaded without copying them (python/s3stream/
// transfer.py sends the memfd once, then only offsets). Off unless a process enables it.
//
// The arena is one sparse memfd mapping: space is handed out front to back and never returned;
// BlockCache recycles the blocks (arena blocks always go back to it), so the pages touched are the
// peak of the blocks in use at once, as without the arena. When the arena is full, blocks come
// from the heap again.
//
// Fork: a child must not allocate from its parent's arena (both would hand out the same bytes), so
// the arena is disabled in the child and blocks it inherited are dropped, not recycled, there.
#pragma once

#include <cstddef>
#include <cstdint>

namespace s3stream::internal {

// Creates this process's arena of `capacity` bytes (address space: pages cost memory only once
// written). Returns its file descriptor, or -1 (errno set) if it cannot be created. Idempotent:
// later calls return the same descriptor, whatever their capacity.
int EnableSharedArena(size_t capacity);

// Size of this process's arena, 0 if it has none.
size_t SharedArenaCapacity();

// Bytes of the arena handed out so far (its high-water mark: blocks are recycled, not returned).
size_t SharedArenaUsed();

// Offset of `p` in this process's arena, or -1 if `p` is not in it.
int64_t SharedArenaOffset(const void* p);

// For BlockCache: `size` bytes from the arena (nullptr when disabled or full), and whether a block
// came from it (true for blocks inherited over a fork too, which must not be deleted).
uint8_t* ArenaAllocate(size_t size);
bool FromArena(const void* p);
bool ArenaOwnedHere();

}  // namespace s3stream::internal
