// Numbers and sizes from untrusted text: strict parsing, no overflow, and memory requests that the
// machine cannot satisfy reported instead of thrown.
#include <gtest/gtest.h>

#include "s3stream/buffer.h"
#include "store/s3/s3_store.h"
#include "util/block_cache.h"
#include "util/numbers.h"

namespace s3stream::internal {
namespace {

TEST(ParseSize, AcceptsPlainDecimalsUpToTheLimit) {
  EXPECT_EQ(ParseSize("0"), 0u);
  EXPECT_EQ(ParseSize("1048576"), 1048576u);
  EXPECT_EQ(ParseSize("4611686018427387904"), kMaxObjectBytes);
}

TEST(ParseSize, RefusesEverythingElse) {
  for (const char* bad : {"", " 1", "1 ", "+1", "-1", "0x10", "1e9", "12abc", "4611686018427387905",
                          "18446744073709551615", "18446744073709551616", "99999999999999999999999"}) {
    EXPECT_FALSE(ParseSize(bad).has_value()) << bad;
  }
}

TEST(ContentRange, IsParsedStrictly) {
  uint64_t first = 0, last = 0, total = 0;
  EXPECT_TRUE(ParseContentRange("bytes 0-99/1000", &first, &last, &total));
  EXPECT_EQ(first, 0u);
  EXPECT_EQ(last, 99u);
  EXPECT_EQ(total, 1000u);
  for (const char* bad : {"bytes 0-99/18446744073709551615", "bytes 0-99/*", "bytes 5-4/10", "bytes 0-10/10",
                          "bytes -1-5/10", "items 0-9/10", "bytes 0-9/10 trailing", "bytes 0 - 9/10", ""}) {
    EXPECT_FALSE(ParseContentRange(bad, &first, &last, &total)) << bad;
  }
}

TEST(HttpDate, BecomesIso8601WithFourDigitYears) {
  EXPECT_EQ(HttpDateToIso8601("Sun, 06 Nov 1994 08:49:37 GMT"), "1994-11-06T08:49:37.000Z");
  // Found by numbers_fuzz: strftime's %Y wrote this year as "997".
  EXPECT_EQ(HttpDateToIso8601("Sun, 06 Nov 0997 08:49:37 GMT"), "0997-11-06T08:49:37.000Z");
  EXPECT_EQ(HttpDateToIso8601("yesterday"), "yesterday");
}

TEST(Memory, AnImpossibleBlockIsRefusedNotThrown) {
  size_t block_size = 0;
  EXPECT_EQ(AcquireBlock(kMaxBlock + 1, &block_size), nullptr);
  EXPECT_EQ(AcquireBlock(~size_t{0}, &block_size), nullptr);  // once made ClassSize loop forever
  EXPECT_FALSE(Buffer::TryAllocate(size_t{1} << 61).valid());  // 2 EiB: no machine has it
  EXPECT_THROW(Buffer::Allocate(~size_t{0}), std::bad_alloc);
  BufferPool pool(~size_t{0});
  EXPECT_FALSE(pool.TryAcquire(size_t{1} << 61).valid());
  EXPECT_EQ(pool.in_use(), 0u);  // what it had counted for the refused request is given back
}

}  // namespace
}  // namespace s3stream::internal
