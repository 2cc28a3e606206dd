// BlockCache: recycles large byte blocks. Readers allocate and free multi-megabyte buffers at a
// high rate; fresh memory from the allocator is usually fresh pages from the kernel, and faulting
// them in cost more CPU than the network copy itself (measured: page faults were the top kernel
// symbol of a shard-reading worker). Blocks come back here instead and are handed out again.
//
// Threading: thread-safe. Fork-safe: the child starts with an empty cache (its lock may have been
// held by a parent thread at the fork).
#pragma once

#include <cstddef>
#include <cstdint>

namespace s3stream::internal {

// Blocks smaller than this go straight to the allocator (which recycles small sizes well).
inline constexpr size_t kMinCachedBlock = 64 << 10;

// The largest block: 2^62 bytes, so the power-of-two classes never overflow.
inline constexpr size_t kMaxBlock = size_t{1} << 62;

// A block of at least `size` bytes; `*block_size` receives its real size, to give back with it.
// nullptr when the memory is not there (or size > kMaxBlock): never throws.
uint8_t* AcquireBlock(size_t size, size_t* block_size);
void ReleaseBlock(uint8_t* block, size_t block_size);

// Bytes held in the cache (not in use). Capped; see S3STREAM_BUFFER_CACHE_BYTES in the .cc.
size_t CachedBlockBytes();

}  // namespace s3stream::internal
