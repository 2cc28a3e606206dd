// Where to split a range of keys for the parallel lister (parallel_list.cc): points between two keys
// chosen from the characters the listing has seen so far, and how much of the key space a range
// still spans (to split the largest first). Pure string arithmetic, no I/O.
//
// Keys are treated as numbers whose digits are the printable ASCII characters seen in listed keys
// (the "alphabet"), 0 standing for the end of a key. A split point is the midpoint of two keys in
// that number system, written back with alphabet characters only: so it is valid UTF-8, holds no
// control character, and sorts strictly between the two keys it splits (or there is none). The
// points are guesses — a range may hold no key at all, and costs one request to learn so — but
// they follow the shape of the keys: "train/000999.jpg" and the end of "train/" split at digits.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace s3stream::internal {

class KeyAlphabet {
 public:
  // Adds the printable ASCII characters (0x20..0x7e) of `key`, from byte `from` on.
  void Learn(std::string_view key, size_t from = 0);
  bool empty() const { return size_ == 0; }
  int size() const { return size_; }

  // A key strictly between `low` and `high` (byte order), both of which start with `prefix`, or
  // nullopt when the alphabet has no such key of a reasonable length. Without `high`, the end of
  // the prefix's key space. The result starts with `prefix`.
  std::optional<std::string> Midpoint(std::string_view prefix, std::string_view low,
                                      std::optional<std::string_view> high) const;

  // How much of the key space lies between `low` and `high` (nullopt: the end of the prefix's key
  // space), as a natural logarithm of the fraction of the whole: comparable between ranges,
  // -infinity for an empty range. Only for choosing which range to split.
  double LogSpan(std::string_view prefix, std::string_view low, std::optional<std::string_view> high) const;

 private:
  int Digit(unsigned char c) const { return digit_[c]; }  // 0 below every symbol, else 1..size_
  void Rebuild();
  // The digits of low and high at byte `at` (`first`: the first after their common part).
  std::pair<int, int> DigitsAt(std::string_view low, std::optional<std::string_view> high, size_t at, bool first) const;

  std::array<bool, 128> seen_{};
  std::array<int, 256> digit_{};  // count of alphabet symbols <= c
  std::array<char, 128> symbol_{};  // symbol_[d - 1]: the character of digit d
  int size_ = 0;
};

}  // namespace s3stream::internal
