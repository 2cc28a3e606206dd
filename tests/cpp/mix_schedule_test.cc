#include "s3stream/mix_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

namespace s3stream {
namespace {

MixSchedule Schedule(std::vector<uint64_t> counts) {
  auto schedule = MixSchedule::Make(std::move(counts));
  EXPECT_TRUE(schedule.ok()) << schedule.status().ToString();
  return std::move(schedule).value();
}

std::vector<MixDraw> Whole(const MixSchedule& schedule) {
  std::vector<uint64_t> positions(schedule.total());
  std::iota(positions.begin(), positions.end(), uint64_t{0});
  auto draws = schedule.Locate(positions);
  EXPECT_TRUE(draws.ok()) << draws.status().ToString();
  return std::move(draws).value();
}

TEST(MixSchedule, SpreadsSourcesEvenlyTiesToTheLowerSource) {
  // Times: source 0 at 1/6, 3/6, 5/6; source 1 at 1/2. 3/6 == 1/2: source 0 first.
  std::vector<MixDraw> draws = Whole(Schedule({3, 1}));
  EXPECT_EQ(draws, (std::vector<MixDraw>{{0, 0}, {0, 1}, {1, 0}, {0, 2}}));
  // Equal counts alternate.
  std::vector<MixDraw> equal = Whole(Schedule({2, 2}));
  EXPECT_EQ(equal, (std::vector<MixDraw>{{0, 0}, {1, 0}, {0, 1}, {1, 1}}));
}

TEST(MixSchedule, EveryDrawOnceInOrderAndEveryPrefixInProportion) {
  const std::vector<uint64_t> counts{700, 200, 97, 3, 0};
  MixSchedule schedule = Schedule(counts);
  ASSERT_EQ(schedule.total(), 1000u);
  std::vector<MixDraw> draws = Whole(schedule);
  std::vector<uint64_t> seen(counts.size(), 0);
  for (uint64_t p = 0; p < draws.size(); ++p) {
    const MixDraw& d = draws[p];
    ASSERT_LT(d.source, counts.size());
    ASSERT_EQ(d.draw, seen[d.source]) << "source " << d.source << " out of order at " << p;
    ++seen[d.source];
    // Not blocks: after p + 1 positions each source has its share of them to within one sample
    // (+1 for the exact-time tie rule).
    for (size_t s = 0; s < counts.size(); ++s) {
      const double share = static_cast<double>(p + 1) * counts[s] / schedule.total();
      ASSERT_LE(std::abs(static_cast<double>(seen[s]) - share), 1.0 + 1e-9) << "source " << s << " at " << p;
    }
  }
  EXPECT_EQ(seen, counts);
}

TEST(MixSchedule, LocateAnswersAnyPositionsAsTheWholeWalk) {
  MixSchedule schedule = Schedule({13, 29, 5});
  std::vector<MixDraw> whole = Whole(schedule);
  std::mt19937_64 rng(7);
  std::vector<uint64_t> positions;
  for (int i = 0; i < 200; ++i) positions.push_back(rng() % schedule.total());  // unordered, with repeats
  auto draws = schedule.Locate(positions);
  ASSERT_TRUE(draws.ok());
  for (size_t i = 0; i < positions.size(); ++i) EXPECT_EQ((*draws)[i], whole[positions[i]]) << positions[i];
  auto none = schedule.Locate({});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(MixSchedule, LargeCountsCompareExactly) {
  // Counts near the limit: (2k + 1) * count passes 64 bits once k is past 2^16. Source 1 has one
  // draw more, so its k-th draw always comes just before source 0's k-th: they alternate 1, 0, 1, 0.
  // At m = 2^16 - 1, products taken modulo 2^64 would put source 1's draw m + 1 before source 0's m.
  const uint64_t half = MixSchedule::kMaxTotal / 2;
  MixSchedule schedule = Schedule({half - 1, half});
  const uint64_t m = 65535;
  auto draws = schedule.Locate(std::vector<uint64_t>{2 * m + 1, 0, 2 * m, 1});
  ASSERT_TRUE(draws.ok()) << draws.status().ToString();
  EXPECT_EQ(*draws, (std::vector<MixDraw>{{0, m}, {1, 0}, {1, m}, {0, 0}}));
}

TEST(MixSchedule, RefusesBadCountsAndPositions) {
  EXPECT_FALSE(MixSchedule::Make({}).ok());
  EXPECT_FALSE(MixSchedule::Make({0, 0}).ok());
  EXPECT_FALSE(MixSchedule::Make({MixSchedule::kMaxTotal, 1}).ok());
  EXPECT_FALSE(MixSchedule::Make({~uint64_t{0}, 2}).ok());  // would wrap a 64-bit sum
  EXPECT_FALSE(MixSchedule::Make(std::vector<uint64_t>(MixSchedule::kMaxSources + 1, 1)).ok());
  MixSchedule schedule = Schedule({2, 1});
  auto past = schedule.Locate(std::vector<uint64_t>{0, 3});
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(past.status().message().find("past the epoch"), std::string::npos);
}

}  // namespace
}  // namespace s3stream
