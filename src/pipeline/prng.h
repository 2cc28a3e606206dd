// A small deterministic PRNG for the epoch plan. The standard library's shuffle and distributions
// are implementation-defined, so the same seed could give another order with another compiler or
// standard library; the plan promises the same order everywhere, hence our own.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

namespace s3stream::internal {

// SplitMix64 (Steele, Lea, Flood 2014): tiny state, good statistical quality, used to seed and run.
class Prng {
 public:
  explicit Prng(uint64_t seed) : state_(seed) {}
  // A generator for one purpose, mixing several keys (seed, epoch, rank, stage...).
  static Prng For(std::initializer_list<uint64_t> keys) {
    uint64_t h = 0x6a09e667f3bcc909ULL;
    for (uint64_t k : keys) h = Mix(h ^ Mix(k + 0x9e3779b97f4a7c15ULL));
    return Prng(h);
  }

  uint64_t Next() { return Mix(state_ += 0x9e3779b97f4a7c15ULL); }

  // Uniform in [0, bound), unbiased (Lemire's multiply-and-reject).
  uint64_t Below(uint64_t bound) {
    unsigned __int128 m = static_cast<unsigned __int128>(Next()) * bound;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < bound) {
      const uint64_t threshold = (0 - bound) % bound;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(Next()) * bound;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  // Fisher-Yates over [first, last).
  template <typename It>
  void Shuffle(It first, It last) {
    for (auto n = static_cast<uint64_t>(last - first); n > 1; --n) std::swap(first[n - 1], first[Below(n)]);
  }

 private:
  static uint64_t Mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  uint64_t state_;
};

}  // namespace s3stream::internal
