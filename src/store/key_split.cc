#include "store/key_split.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace s3stream::internal {
namespace {

constexpr size_t kDigits = 16;  // resolution of a midpoint, in alphabet characters after the keys' common prefix
constexpr size_t kSpanDigits = 8;

size_t CommonPrefix(std::string_view a, std::string_view b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

}  // namespace

void KeyAlphabet::Learn(std::string_view key, size_t from) {
  bool changed = false;
  for (size_t i = from; i < key.size(); ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    if (c >= 0x20 && c < 0x7f && !seen_[c]) {
      seen_[c] = true;
      changed = true;
    }
  }
  if (changed) Rebuild();
}

void KeyAlphabet::Rebuild() {
  size_ = 0;
  for (int c = 0; c < 256; ++c) {
    if (c < 128 && seen_[c]) symbol_[size_++] = static_cast<char>(c);
    digit_[c] = size_;
  }
}

std::pair<int, int> KeyAlphabet::DigitsAt(std::string_view low, std::optional<std::string_view> high, size_t at,
                                          bool first) const {
  const int a = at < low.size() ? Digit(static_cast<unsigned char>(low[at])) : 0;
  int b = 0;
  if (high) {
    b = at < high->size() ? Digit(static_cast<unsigned char>((*high)[at])) : 0;
  } else if (first) {
    b = size_ + 1;  // the end of the prefix's key space: one past the largest digit, then zeros
  }
  return {a, b};
}

std::optional<std::string> KeyAlphabet::Midpoint(std::string_view prefix, std::string_view low,
                                                 std::optional<std::string_view> high) const {
  if (size_ == 0) return std::nullopt;
  const int base = size_ + 1;
  const size_t common = high ? CommonPrefix(low, *high) : prefix.size();
  // low + high, digit by digit after the common part.
  std::vector<int> sum(kDigits + 1, 0);  // sum[0]: the carry
  for (size_t i = 0; i < kDigits; ++i) {
    const auto [a, b] = DigitsAt(low, high, common + i, i == 0);
    sum[i + 1] = a + b;
  }
  for (size_t i = kDigits; i > 0; --i) {
    if (sum[i] >= base) {
      sum[i] -= base;
      sum[i - 1] += 1;
    }
  }
  std::vector<int> mid(kDigits + 1);
  int rest = 0;
  for (size_t i = 0; i <= kDigits; ++i) {
    const int value = rest * base + sum[i];
    mid[i] = value / 2;
    rest = value % 2;
  }
  size_t last = kDigits;
  while (last > 0 && mid[last] == 0) --last;
  std::string out(low.substr(0, common));
  for (size_t i = 1; i <= last; ++i) out += mid[i] == 0 ? symbol_[0] : symbol_[mid[i] - 1];
  if (out.size() < prefix.size() || out.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  if (!(std::string_view(out) > low)) return std::nullopt;
  if (high && !(std::string_view(out) < *high)) return std::nullopt;
  return out;
}

double KeyAlphabet::LogSpan(std::string_view prefix, std::string_view low, std::optional<std::string_view> high) const {
  constexpr double kEmpty = -std::numeric_limits<double>::infinity();
  if (high && !(low < *high)) return kEmpty;
  const double base = size_ + 1;
  const size_t common = high ? CommonPrefix(low, *high) : prefix.size();
  double fraction = 0, scale = 1;
  for (size_t i = 0; i < kSpanDigits; ++i) {
    scale /= base;
    const auto [a, b] = DigitsAt(low, high, common + i, i == 0);
    fraction += (b - a) * scale;
  }
  if (!(fraction > 0)) fraction = scale;  // low < high, but not at this resolution: a sliver
  return std::log(fraction) - static_cast<double>(common - std::min(common, prefix.size())) * std::log(base);
}

}  // namespace s3stream::internal
