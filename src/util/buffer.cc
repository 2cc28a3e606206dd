#include "s3stream/buffer.h"

#include "s3stream/interrupt.h"
#include "util/block_cache.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <new>

namespace s3stream {
namespace internal {

struct PoolState {
  std::mutex mu;
  std::condition_variable released;
  size_t limit = 0;
  size_t in_use = 0;
  size_t peak = 0;

  bool Fits(size_t n) const { return in_use + n <= limit || in_use == 0; }
  void Take(size_t n) {
    in_use += n;
    peak = std::max(peak, in_use);
  }
};

struct BufferStorage {
  // Storage for n bytes, or nullptr when the memory is not there.
  static std::shared_ptr<BufferStorage> Make(size_t n) {
    size_t block_size = 0;
    uint8_t* bytes = AcquireBlock(n, &block_size);
    if (bytes == nullptr) return nullptr;
    auto storage = std::make_shared<BufferStorage>(bytes, n, nullptr);
    storage->block_size = block_size;
    return storage;
  }
  BufferStorage(uint8_t* external, size_t n, std::function<void()> release_fn)
      : bytes(external), capacity(n), release(std::move(release_fn)) {}
  ~BufferStorage() {
    if (release) {
      release();
    } else {
      ReleaseBlock(bytes, block_size);
    }
    if (auto pool = owner.lock()) {
      std::lock_guard<std::mutex> lock(pool->mu);
      pool->in_use -= capacity;
      pool->released.notify_all();
    }
  }
  size_t block_size = 0;             // of a block from the cache (not for wrapped memory)
  uint8_t* bytes;
  size_t capacity;
  std::function<void()> release;     // for wrapped memory
  std::weak_ptr<PoolState> owner;    // weak: buffers may outlive their pool
};

}  // namespace internal

Buffer::Buffer(std::shared_ptr<internal::BufferStorage> storage) : storage_(std::move(storage)) {}

Buffer Buffer::Allocate(size_t capacity) {
  auto storage = internal::BufferStorage::Make(capacity);
  if (!storage) throw std::bad_alloc();
  return Buffer(std::move(storage));
}

Buffer Buffer::TryAllocate(size_t capacity) {
  auto storage = internal::BufferStorage::Make(capacity);
  return storage ? Buffer(std::move(storage)) : Buffer();
}

Buffer Buffer::Wrap(uint8_t* data, size_t size, std::function<void()> release) {
  Buffer b(std::make_shared<internal::BufferStorage>(data, size, std::move(release)));
  b.size_ = size;
  return b;
}

Buffer Buffer::CopyOf(std::span<const uint8_t> bytes) {
  Buffer b = Allocate(bytes.size());
  if (!bytes.empty()) std::memcpy(b.data(), bytes.data(), bytes.size());
  b.size_ = bytes.size();
  return b;
}

Buffer Buffer::CopyOf(std::string_view bytes) {
  return CopyOf(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

uint8_t* Buffer::base() const {
  static uint8_t empty = 0;
  return storage_ ? storage_->bytes : &empty;
}

size_t Buffer::capacity() const { return storage_ ? storage_->capacity - offset_ : 0; }

void Buffer::resize(size_t size) {
  assert(size <= capacity());
  size_ = size;
}

bool Buffer::Append(std::span<const uint8_t> bytes) {
  if (bytes.size() > capacity() - size_) return false;
  if (!bytes.empty()) std::memcpy(data() + size_, bytes.data(), bytes.size());
  size_ += bytes.size();
  return true;
}

Buffer Buffer::Slice(size_t offset, size_t length) const {
  assert(offset + length <= size_);
  Buffer b(storage_);
  b.offset_ = offset_ + offset;
  b.size_ = length;
  return b;
}

BufferPool::BufferPool(size_t limit_bytes) : state_(std::make_shared<internal::PoolState>()) {
  state_->limit = limit_bytes;
}

BufferPool::~BufferPool() = default;

Buffer BufferPool::Acquire(size_t capacity) {
  {
    std::unique_lock<std::mutex> lock(state_->mu);
    while (!state_->released.wait_for(lock, kInterruptPoll, [&] { return state_->Fits(capacity); })) {
      lock.unlock();  // the check may run Python signal handlers: never under the pool's lock
      const bool stop = InterruptRequested();
      lock.lock();
      if (stop && !state_->Fits(capacity)) return Buffer();
    }
    state_->Take(capacity);
  }
  return Adopt(capacity);
}

Buffer BufferPool::TryAcquire(size_t capacity) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->Fits(capacity)) return Buffer();
    state_->Take(capacity);
  }
  return Adopt(capacity);
}

Buffer BufferPool::Adopt(size_t capacity) {
  auto storage = internal::BufferStorage::Make(capacity);
  if (!storage) {
    std::lock_guard<std::mutex> lock(state_->mu);  // give back what was counted for it
    state_->in_use -= capacity;
    state_->released.notify_all();
    return Buffer();
  }
  storage->owner = state_;
  return Buffer(std::move(storage));
}

size_t BufferPool::limit() const { return state_->limit; }

size_t BufferPool::in_use() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->in_use;
}

size_t BufferPool::peak() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->peak;
}

}  // namespace s3stream
