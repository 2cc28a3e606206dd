// libFuzzer target for the numbers taken from response headers: ParseSize (Content-Length, listed
// sizes), ParseContentRange, HttpDateToIso8601 and FindHeader. The input is header text: a value,
// or "Name: value" lines. Each parser is compared with an independent reading of the same text:
// - ParseSize accepts exactly 1-19 ASCII digits worth at most 2^62, and the value prints back as
//   those digits (leading zeros aside);
// - ParseContentRange accepts exactly "bytes A-B/T" with A <= B < T <= 2^62, each a ParseSize
//   number, and what it returns formats back to a range that parses the same;
// - a converted date is ISO 8601 of fixed shape ("YYYY-MM-DDTHH:MM:SS.000Z");
// - FindHeader finds the first header whose name matches whatever the letter case.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "http/transport.h"
#include "store/s3/s3_store.h"
#include "util/numbers.h"

namespace {

using namespace s3stream::internal;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "numbers_fuzz: property violated: %s\n", what);
    std::abort();
  }
}

// The oracle: 128-bit arithmetic, no length shortcut.
std::optional<uint64_t> ReferenceSize(std::string_view text) {
  if (text.empty()) return std::nullopt;
  unsigned __int128 value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<unsigned>(c - '0');
    if (value > kMaxObjectBytes) return std::nullopt;
  }
  return static_cast<uint64_t>(value);
}

void CheckSize(std::string_view text) {
  std::optional<uint64_t> got = ParseSize(text);
  std::optional<uint64_t> want = ReferenceSize(text);
  // Leading zeros beyond 19 digits are refused by ParseSize's length bound: a stricter reading, allowed.
  if (text.size() <= 19) Check(got == want, "ParseSize agrees with the reference");
  if (!got) return;
  Check(want && *got == *want, "ParseSize accepts only what the reference accepts, with its value");
  Check(*got <= kMaxObjectBytes, "sizes are at most 2^62");
  size_t nonzero = text.find_first_not_of('0');
  Check(std::to_string(*got) == (nonzero == text.npos ? "0" : text.substr(nonzero)), "a size prints back as its digits");
}

void CheckContentRange(std::string_view text) {
  uint64_t first = 1, last = 2, total = 3;
  const bool ok = ParseContentRange(text, &first, &last, &total);

  bool want = false;
  if (text.starts_with("bytes ")) {
    std::string_view rest = text.substr(6);
    size_t dash = rest.find('-'), slash = rest.find('/');
    if (dash != rest.npos && slash != rest.npos && dash < slash) {
      auto a = ParseSize(rest.substr(0, dash)), b = ParseSize(rest.substr(dash + 1, slash - dash - 1)),
           t = ParseSize(rest.substr(slash + 1));
      want = a && b && t && *a <= *b && *b < *t;
      if (want) Check(ok && first == *a && last == *b && total == *t, "ParseContentRange returns the numbers sent");
    }
  }
  Check(ok == want, "ParseContentRange accepts exactly bytes A-B/T with A <= B < T");
  if (!ok) {
    Check(first == 1 && last == 2 && total == 3, "a refused range leaves the outputs alone");
    return;
  }
  Check(first <= last && last < total && total <= kMaxObjectBytes, "first <= last < total <= 2^62");
  Check(last - first + 1 <= total, "the range's length fits in the object");
  std::string again = "bytes " + std::to_string(first) + "-" + std::to_string(last) + "/" + std::to_string(total);
  uint64_t f2 = 0, l2 = 0, t2 = 0;
  Check(ParseContentRange(again, &f2, &l2, &t2) && f2 == first && l2 == last && t2 == total,
        "a parsed range formats back to the same range");
}

void CheckDate(const std::string& text) {
  std::string iso = HttpDateToIso8601(text);
  if (iso == text) return;  // not a date (or already ISO): passed on as it came
  Check(iso.size() == 24, "an ISO 8601 date has 24 characters");
  for (size_t i = 0; i < iso.size(); ++i) {
    char c = iso[i];
    bool ok = i == 4 || i == 7 ? c == '-' : i == 10 ? c == 'T' : i == 13 || i == 16 ? c == ':' : i == 19 ? c == '.'
            : i == 23 ? c == 'Z' : c >= '0' && c <= '9';
    Check(ok, "an ISO 8601 date has the shape YYYY-MM-DDTHH:MM:SS.000Z");
  }
}

void CheckHeaders(std::string_view text) {
  // "Name: value" lines, as the transport splits them; the first name looked up in flipped case.
  HttpHeaders headers;
  size_t from = 0;
  while (from < text.size() && headers.size() < 64) {
    size_t nl = text.find('\n', from);
    std::string_view line = text.substr(from, nl == text.npos ? text.npos : nl - from);
    size_t colon = line.find(':');
    if (colon != line.npos) headers.emplace_back(std::string(line.substr(0, colon)), std::string(line.substr(colon + 1)));
    if (nl == text.npos) break;
    from = nl + 1;
  }
  for (const auto& [name, value] : headers) {
    CheckSize(value);
    CheckContentRange(value);
  }
  if (headers.empty() || headers.front().first.find('\0') != std::string::npos) return;  // names are text
  std::string wanted = headers.front().first;
  for (char& c : wanted) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) c ^= 0x20;
  }
  auto same_name = [](std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      char x = a[i], y = b[i];
      if (x >= 'A' && x <= 'Z') x ^= 0x20;
      if (y >= 'A' && y <= 'Z') y ^= 0x20;
      if (x != y) return false;
    }
    return true;
  };
  const std::string* found = FindHeader(headers, wanted);
  for (const auto& [name, value] : headers) {
    if (same_name(name, wanted)) {
      Check(found == &value, "FindHeader returns the first header of that name, whatever the letter case");
      return;
    }
  }
  Check(false, "FindHeader finds a header that is there");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  CheckSize(text);
  CheckContentRange(text);
  CheckContentRange("bytes " + text);
  CheckDate(text);
  CheckHeaders(text);
  return 0;
}
