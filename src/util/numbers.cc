#include "util/numbers.h"

namespace s3stream::internal {

std::optional<uint64_t> ParseSize(std::string_view text) {
  if (text.empty() || text.size() > 19) return std::nullopt;  // 2^62 has 19 digits
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<uint64_t>(c - '0');  // 19 digits fit in 64 bits
  }
  if (value > kMaxObjectBytes) return std::nullopt;
  return value;
}

}  // namespace s3stream::internal
