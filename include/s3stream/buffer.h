// Buffer: a reference-counted byte buffer. Copies of a Buffer share storage, so a buffer filled by the
// network thread can reach Python (and torch) without a copy: the Python object holds a Buffer.
// BufferPool: bounds the bytes held by readers; Acquire blocks while the pool is at its limit, which
// is how a slow consumer turns into backpressure instead of memory growth.
//
// Threading: a Buffer may be passed between threads; concurrent writes to the same bytes are the
// caller's business. BufferPool is thread-safe, and its storage may outlive the pool object.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>

#include "s3stream/status.h"

namespace s3stream {

namespace internal {
struct BufferStorage;
struct PoolState;
}  // namespace internal

class Buffer {
 public:
  Buffer() = default;
  // Uninitialised storage of `capacity` bytes, size 0. Not counted against any pool. Throws
  // std::bad_alloc when the memory is not there; TryAllocate returns an invalid Buffer instead
  // (for sizes that come from a server, and on threads where nothing may throw).
  static Buffer Allocate(size_t capacity);
  static Buffer TryAllocate(size_t capacity);
  static Buffer CopyOf(std::span<const uint8_t> bytes);
  static Buffer CopyOf(std::string_view bytes);
  // A Buffer over memory someone else owns; `release` runs once the last reference is gone.
  static Buffer Wrap(uint8_t* data, size_t size, std::function<void()> release);

  uint8_t* data() { return base() + offset_; }
  const uint8_t* data() const { return base() + offset_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Bytes available from data() to the end of the storage.
  size_t capacity() const;
  // Grow or shrink within capacity (contents past the old size are uninitialised).
  void resize(size_t size);
  // Append within capacity; returns false (and appends nothing) if `bytes` does not fit.
  bool Append(std::span<const uint8_t> bytes);

  std::span<uint8_t> span() { return {data(), size_}; }
  std::span<const uint8_t> span() const { return {data(), size_}; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data()), size_}; }

  // A view of [offset, offset+length) sharing this buffer's storage.
  Buffer Slice(size_t offset, size_t length) const;

  bool valid() const { return storage_ != nullptr; }

 private:
  friend class BufferPool;
  explicit Buffer(std::shared_ptr<internal::BufferStorage> storage);
  uint8_t* base() const;

  std::shared_ptr<internal::BufferStorage> storage_;
  size_t offset_ = 0;
  size_t size_ = 0;
};

class BufferPool {
 public:
  // At most `limit_bytes` of storage handed out by this pool may be alive at once.
  explicit BufferPool(size_t limit_bytes);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // Blocks until `capacity` bytes fit under the limit. A request larger than the whole limit is
  // granted when nothing else is outstanding, so one oversized read never deadlocks. An
  // interrupted wait (interrupt.h) returns an invalid Buffer.
  Buffer Acquire(size_t capacity);
  // Returns an invalid Buffer instead of blocking. Both return an invalid Buffer when the memory is
  // not there.
  Buffer TryAcquire(size_t capacity);

  size_t limit() const;
  size_t in_use() const;
  // Highest in_use() seen; tests use it to check the limit holds.
  size_t peak() const;

 private:
  Buffer Adopt(size_t capacity);  // storage for bytes already counted as in use
  std::shared_ptr<internal::PoolState> state_;
};

}  // namespace s3stream
