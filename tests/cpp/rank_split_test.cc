#include "s3stream/rank_split.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace s3stream {
namespace {

RankSplit Split(std::vector<PositionRange> remaining, int world, uint64_t stripe, Remainder remainder) {
  auto split = RankSplit::Make(std::move(remaining), world, stripe, remainder);
  EXPECT_TRUE(split.ok()) << split.status().ToString();
  return std::move(split).value();
}

// Position -> times delivered, by every rank of `split` reading the first `count` of its share.
void Deliver(const RankSplit& split, uint64_t count, std::map<uint64_t, int>& seen) {
  for (int r = 0; r < split.world_size(); ++r) {
    auto positions = split.RankPositions(r);
    ASSERT_EQ(positions.size(), split.per_rank()) << "rank " << r;
    for (uint64_t i = 0; i < count; ++i) ++seen[positions[i]];
  }
}

TEST(RankSplit, WholeEpochStripesRanksInTurns) {
  RankSplit split = Split({{0, 20}}, 2, 3, Remainder::kDrop);
  EXPECT_EQ(split.per_rank(), 10u);
  // Turns of 3: rank 0 takes 0-2, rank 1 3-5, rank 0 6-8, ...; the last 2 entries of each rank's 10
  // come from the tail, in equal blocks.
  EXPECT_EQ(split.RankPositions(0), (std::vector<uint64_t>{0, 1, 2, 6, 7, 8, 12, 13, 14, 18}));
  EXPECT_EQ(split.RankPositions(1), (std::vector<uint64_t>{3, 4, 5, 9, 10, 11, 15, 16, 17, 19}));
}

TEST(RankSplit, DropLeavesTheTailPadRepeatsTheStart) {
  RankSplit drop = Split({{0, 7}}, 3, 1, Remainder::kDrop);
  std::map<uint64_t, int> seen;
  Deliver(drop, drop.per_rank(), seen);
  EXPECT_EQ(seen.size(), 6u);
  EXPECT_FALSE(seen.count(6));
  RankSplit pad = Split({{0, 7}}, 3, 1, Remainder::kPad);
  seen.clear();
  Deliver(pad, pad.per_rank(), seen);
  EXPECT_EQ(pad.per_rank(), 3u);
  EXPECT_EQ(seen.size(), 7u);
  EXPECT_EQ(seen[0], 2);
  EXPECT_EQ(seen[1], 2);
}

TEST(RankSplit, ResumeAtAnyWorldSizeDeliversTheRestExactlyOnce) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const uint64_t total = 1 + rng() % 300;
    const int world = 1 + static_cast<int>(rng() % 9);
    const uint64_t stripe = 1 + rng() % 20;
    RankSplit first = Split({{0, total}}, world, stripe, Remainder::kPad);
    const uint64_t consumed = first.per_rank() == 0 ? 0 : rng() % (first.per_rank() + 1);
    std::map<uint64_t, int> before;
    Deliver(first, consumed, before);
    auto rest = first.After(consumed);
    ASSERT_TRUE(rest.ok());
    // Stop twice: the second run is itself interrupted and continued by a third world size.
    const int world2 = 1 + static_cast<int>(rng() % 9);
    RankSplit second = Split(*rest, world2, 1 + rng() % 20, Remainder::kDrop);
    const uint64_t consumed2 = second.per_rank() == 0 ? 0 : rng() % (second.per_rank() + 1);
    std::map<uint64_t, int> after;
    Deliver(second, consumed2, after);
    auto rest2 = second.After(consumed2);
    ASSERT_TRUE(rest2.ok());
    RankSplit third = Split(*rest2, 1 + static_cast<int>(rng() % 9), 1 + rng() % 20, Remainder::kPad);
    Deliver(third, third.per_rank(), after);
    // Everything before the stop was delivered (pad repeats aside) and nothing of it again; the
    // rest exactly once, except what kDrop left out of the middle run, which the last run took.
    for (uint64_t p = 0; p < total; ++p) {
      const bool earlier = before.count(p) > 0;
      const int later = after.count(p) ? after[p] : 0;
      if (earlier) {
        EXPECT_EQ(later, 0) << "position " << p << " replayed (trial " << trial << ")";
      } else {
        EXPECT_GE(later, 1) << "position " << p << " lost (trial " << trial << ")";
      }
    }
  }
}

TEST(RankSplit, AfterRemovesExactlyWhatEveryRankDelivered) {
  // Turns of 3 between 2 ranks: after 4 each, rank 0 read 0-2 and 6, rank 1 read 3-5 and 9.
  RankSplit split = Split({{0, 24}}, 2, 3, Remainder::kDrop);
  auto rest = split.After(4);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(*rest, (std::vector<PositionRange>{{7, 9}, {10, 24}}));
}

TEST(RankSplit, BadInput) {
  EXPECT_FALSE(RankSplit::Make({{0, 5}, {3, 8}}, 2, 1, Remainder::kDrop).ok());  // overlap
  EXPECT_FALSE(RankSplit::Make({{5, 5}}, 2, 1, Remainder::kDrop).ok());          // empty range
  EXPECT_FALSE(RankSplit::Make({{0, 5}}, 0, 1, Remainder::kDrop).ok());
  EXPECT_FALSE(RankSplit::Make({{0, 5}}, 1, 0, Remainder::kDrop).ok());
  RankSplit split = Split({{0, 10}}, 2, 1, Remainder::kDrop);
  EXPECT_FALSE(split.After(6).ok());
  RankSplit nothing = Split({}, 3, 2, Remainder::kPad);
  EXPECT_EQ(nothing.per_rank(), 0u);
  EXPECT_TRUE(nothing.RankPositions(1).empty());
}

}  // namespace
}  // namespace s3stream
