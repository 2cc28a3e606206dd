// Split points of the parallel lister (store/key_split.h): strictly between the keys they split,
// printable ASCII only, under the listing's prefix; and the span estimate that orders ranges.
#include "store/key_split.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

namespace s3stream::internal {
namespace {

KeyAlphabet Learned(std::initializer_list<const char*> keys, size_t from = 0) {
  KeyAlphabet a;
  for (const char* k : keys) a.Learn(k, from);
  return a;
}

bool Printable(const std::string& s, size_t from) {
  for (size_t i = from; i < s.size(); ++i) {
    if (s[i] < 0x20 || s[i] > 0x7e) return false;
  }
  return true;
}

TEST(KeyAlphabetTest, NoAlphabetNoSplit) {
  KeyAlphabet a;
  EXPECT_TRUE(a.empty());
  EXPECT_FALSE(a.Midpoint("p/", "p/a", std::nullopt));
  a.Learn("p/\xc3\xa9\t", 2);  // neither a non-ASCII byte nor a control character is a symbol
  EXPECT_TRUE(a.empty());
}

TEST(KeyAlphabetTest, MidpointOfTheOpenEndFollowsTheKeysCharacters) {
  KeyAlphabet a = Learned({"train/000000.jpg", "train/000999.jpg"}, 6);
  EXPECT_EQ(a.size(), 6);  // . 0 9 g j p
  auto m = a.Midpoint("train/", "train/000999.jpg", std::nullopt);
  ASSERT_TRUE(m);
  EXPECT_GT(*m, "train/000999.jpg");
  EXPECT_EQ(m->rfind("train/", 0), 0u);
  EXPECT_TRUE(Printable(*m, 0)) << *m;
}

TEST(KeyAlphabetTest, MidpointIsStrictlyBetween) {
  std::mt19937 rng(7);
  const std::string chars = "./0123456789_abcdefghijklmnopqrstuvwxyzABC-";
  auto random_key = [&] {
    std::string k = "ds/";
    const int n = 1 + static_cast<int>(rng() % 20);
    for (int i = 0; i < n; ++i) k += chars[rng() % chars.size()];
    if (rng() % 5 == 0) k += "\xc3\xa9";  // non-ASCII bytes sort above every symbol
    return k;
  };
  KeyAlphabet a;
  for (int i = 0; i < 50; ++i) a.Learn(random_key(), 3);
  int found = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string x = random_key(), y = random_key();
    if (x == y) continue;
    if (y < x) std::swap(x, y);
    auto m = a.Midpoint("ds/", x, y);
    if (m) {
      ++found;
      ASSERT_GT(*m, x);
      ASSERT_LT(*m, y);
      ASSERT_EQ(m->rfind("ds/", 0), 0u);
      ASSERT_TRUE(Printable(*m, 0)) << *m;
    }
    auto open = a.Midpoint("ds/", x, std::nullopt);
    ASSERT_TRUE(open) << x;
    ASSERT_GT(*open, x);
  }
  EXPECT_GT(found, 19000);  // only keys next to each other in the alphabet have none
}

TEST(KeyAlphabetTest, AdjacentKeysHaveNoMidpoint) {
  KeyAlphabet a = Learned({"ab"});
  EXPECT_FALSE(a.Midpoint("", "a", std::string_view("a")));
  EXPECT_FALSE(a.Midpoint("", "b", std::string_view("a")));
}

TEST(KeyAlphabetTest, LogSpanOrdersRangesByWidth) {
  KeyAlphabet a = Learned({"p/0123456789"}, 2);
  const double wide = a.LogSpan("p/", "p/1", std::string_view("p/8"));
  const double narrow = a.LogSpan("p/", "p/1", std::string_view("p/2"));
  const double deep = a.LogSpan("p/", "p/1111", std::string_view("p/1119"));
  const double rest = a.LogSpan("p/", "p/5", std::nullopt);
  EXPECT_GT(wide, narrow);
  EXPECT_GT(narrow, deep);
  EXPECT_GT(rest, narrow);
  EXPECT_TRUE(std::isinf(a.LogSpan("p/", "p/2", std::string_view("p/1"))));
  EXPECT_TRUE(std::isfinite(deep));
}

}  // namespace
}  // namespace s3stream::internal
