// Numbers from untrusted text: HTTP headers, XML and JSON from a server, sidecar files. Digits
// only (no sign, no spaces, no "0x"), and never an overflow: what does not parse is refused, not
// read as 0 or as the largest value.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace s3stream::internal {

// The largest object size or offset s3stream accepts from a server (2^62 bytes, far beyond S3's
// 5 TiB object limit): sums of two such values never overflow 64 bits.
inline constexpr uint64_t kMaxObjectBytes = uint64_t{1} << 62;

// A decimal number of at most kMaxObjectBytes; nullopt for anything else.
std::optional<uint64_t> ParseSize(std::string_view text);

}  // namespace s3stream::internal
