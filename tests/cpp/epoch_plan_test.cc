#include "s3stream/epoch_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

namespace s3stream {
namespace {

// `counts[i]` samples in shard i, each sample `sample_bytes` long.
std::vector<ShardLayout> Shards(const std::vector<uint64_t>& counts, uint64_t sample_bytes = 100'000) {
  std::vector<ShardLayout> out;
  for (uint64_t n : counts) {
    ShardLayout s;
    for (uint64_t i = 0; i <= n; ++i) s.offsets.push_back(i * sample_bytes);
    out.push_back(std::move(s));
  }
  return out;
}

uint64_t Key(const SampleRef& r) { return (uint64_t{r.shard} << 32) | r.index; }

std::vector<EpochPlan> AllRanks(const std::vector<ShardLayout>& shards, PlanOptions o) {
  std::vector<EpochPlan> plans;
  for (int r = 0; r < o.world_size; ++r) {
    o.rank = r;
    auto plan = EpochPlan::Make(shards, o);
    if (!plan.ok()) {
      ADD_FAILURE() << plan.status().ToString();
      return {};
    }
    plans.push_back(std::move(plan).value());
  }
  return plans;
}

struct Case {
  std::vector<uint64_t> counts;
  int world;
  Remainder remainder;
};

class ExactlyOnce : public ::testing::TestWithParam<Case> {};

TEST_P(ExactlyOnce, EverySampleOnceAndEqualCounts) {
  const Case& c = GetParam();
  auto shards = Shards(c.counts);
  uint64_t total = 0;
  for (auto n : c.counts) total += n;
  for (bool shuffle : {false, true}) {
    PlanOptions o;
    o.world_size = c.world;
    o.remainder = c.remainder;
    o.shuffle = shuffle;
    o.batch_size = 3;
    o.chunk_bytes = 250'000;
    auto plans = AllRanks(shards, o);
    ASSERT_EQ(plans.size(), static_cast<size_t>(c.world));
    std::map<uint64_t, int> seen;
    for (const auto& p : plans) {
      EXPECT_EQ(p.samples_per_rank(), plans[0].samples_per_rank());  // DDP: equal counts
      for (const auto& ref : p.order()) ++seen[Key(ref)];
    }
    const uint64_t per_rank = plans[0].samples_per_rank();
    if (c.remainder == Remainder::kDrop) {
      EXPECT_EQ(per_rank, total / c.world);
      EXPECT_EQ(seen.size(), per_rank * c.world);  // only the remainder is missing
      for (auto& [k, n] : seen) EXPECT_EQ(n, 1);
    } else {
      EXPECT_EQ(per_rank, (total + c.world - 1) / c.world);
      EXPECT_EQ(seen.size(), total);  // nothing missing
      uint64_t repeats = 0;
      for (auto& [k, n] : seen) repeats += n - 1;
      EXPECT_EQ(repeats, per_rank * c.world - total);  // only the padding repeats
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ExactlyOnce,
    ::testing::Values(Case{{10, 10, 10}, 2, Remainder::kDrop}, Case{{10, 7, 3, 1}, 2, Remainder::kDrop},
                      Case{{10, 7, 3, 1}, 2, Remainder::kPad}, Case{{25}, 6, Remainder::kDrop},   // 1 shard, 6 ranks
                      Case{{25}, 6, Remainder::kPad}, Case{{5, 0, 6}, 4, Remainder::kPad},      // an empty shard
                      Case{{1000, 999, 17}, 3, Remainder::kDrop}, Case{{3}, 3, Remainder::kDrop}));

TEST(EpochPlan, WorkersSplitTheRankExactlyWhateverTheirNumber) {
  PlanOptions o;
  o.batch_size = 4;
  auto plan = EpochPlan::Make(Shards({13, 9, 5}), o).value();
  for (int workers : {1, 2, 3, 5, 30}) {
    std::vector<int> hits(plan.samples_per_rank(), 0);
    // DataLoader's in-order delivery: batch i comes from worker i % workers.
    std::vector<std::vector<uint64_t>> per(workers);
    for (int w = 0; w < workers; ++w) per[w] = plan.WorkerPositions(w, workers);
    std::vector<uint64_t> delivered;
    std::vector<size_t> cursor(workers, 0);
    for (int batch = 0;; ++batch) {
      int w = batch % workers;
      if (cursor[w] >= per[w].size()) break;
      for (int i = 0; i < 4 && cursor[w] < per[w].size(); ++i) delivered.push_back(per[w][cursor[w]++]);
    }
    for (uint64_t p : delivered) ++hits[p];
    for (int h : hits) EXPECT_EQ(h, 1) << workers << " workers";
    // ... and in the rank's order: the sequence does not depend on the number of workers.
    for (size_t i = 0; i < delivered.size(); ++i) ASSERT_EQ(delivered[i], i) << workers << " workers";
  }
}

TEST(EpochPlan, ResumeContinuesTheSameSequence) {
  PlanOptions o;
  o.batch_size = 5;
  auto plan = EpochPlan::Make(Shards({40, 33}), o).value();
  for (uint64_t start : {0u, 5u, 7u, 72u}) {
    for (int workers : {1, 3}) {
      std::set<uint64_t> got;
      for (int w = 0; w < workers; ++w) {
        for (uint64_t p : plan.WorkerPositions(w, workers, start)) {
          EXPECT_GE(p, start);
          EXPECT_TRUE(got.insert(p).second);
        }
      }
      EXPECT_EQ(got.size(), plan.samples_per_rank() - start);
    }
  }
}

TEST(EpochPlan, DeterministicAndReshuffledEachEpoch) {
  auto shards = Shards({50, 50, 50, 50});
  PlanOptions o;
  o.seed = 7;
  o.chunk_bytes = 300'000;
  auto a = EpochPlan::Make(shards, o).value().order();
  auto b = EpochPlan::Make(shards, o).value().order();
  EXPECT_EQ(a, b);
  o.epoch = 1;
  auto c = EpochPlan::Make(shards, o).value().order();
  EXPECT_NE(a, c);
  o.seed = 8;
  o.epoch = 0;
  EXPECT_NE(a, EpochPlan::Make(shards, o).value().order());
  o.shuffle = false;
  auto plain = EpochPlan::Make(shards, o).value().order();
  for (size_t i = 0; i < plain.size(); ++i) {
    // Unshuffled: shards in order, samples in order, no interleaving.
    EXPECT_EQ(plain[i], (SampleRef{static_cast<uint32_t>(i / 50), static_cast<uint32_t>(i % 50)})) << i;
  }
}

TEST(EpochPlan, ShuffleMixesShardsWithinBatches) {
  PlanOptions o;
  o.batch_size = 32;
  o.chunk_bytes = 400'000;  // 4 samples per chunk
  auto plan = EpochPlan::Make(Shards(std::vector<uint64_t>(16, 64)), o).value();
  double shards_per_batch = 0;
  size_t batches = 0;
  for (size_t b = 0; b + 32 <= plan.order().size(); b += 32, ++batches) {
    std::set<uint32_t> s;
    for (size_t i = b; i < b + 32; ++i) s.insert(plan.order()[i].shard);
    shards_per_batch += s.size();
  }
  EXPECT_GT(shards_per_batch / batches, 4.0);  // a batch draws on many shards, not one
}

TEST(EpochPermutation, PermutesDeterministicallyAndDiffersByEpoch) {
  std::vector<uint64_t> a = EpochPermutation(1000, 7, 0);
  std::vector<uint64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (uint64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(a, EpochPermutation(1000, 7, 0));
  EXPECT_NE(a, EpochPermutation(1000, 7, 1));
  EXPECT_NE(a, EpochPermutation(1000, 8, 0));
  EXPECT_TRUE(EpochPermutation(0, 7, 0).empty());
}

TEST(EpochPlan, Errors) {
  PlanOptions o;
  EXPECT_EQ(EpochPlan::Make({}, o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(EpochPlan::Make(Shards({0, 0}), o).status().message().find("empty"), std::string::npos);
  o.world_size = 4;
  Status few = EpochPlan::Make(Shards({3}), o).status();
  EXPECT_NE(few.message().find("use pad"), std::string::npos) << few.message();
  o.remainder = Remainder::kPad;
  EXPECT_TRUE(EpochPlan::Make(Shards({3}), o).ok());
  o.rank = 4;
  EXPECT_EQ(EpochPlan::Make(Shards({3}), o).status().code(), StatusCode::kInvalidArgument);
}

TEST(SamplesPerRank, DropLeavesTheRestOutPadRoundsUp) {
  EXPECT_EQ(SamplesPerRank(10, 3, Remainder::kDrop), 3u);
  EXPECT_EQ(SamplesPerRank(10, 3, Remainder::kPad), 4u);
  EXPECT_EQ(SamplesPerRank(9, 3, Remainder::kPad), 3u);
  EXPECT_EQ(SamplesPerRank(2, 3, Remainder::kDrop), 0u);  // EpochPlan::Make refuses this one
  const uint64_t huge = ~uint64_t{0};
  EXPECT_EQ(SamplesPerRank(huge, 2, Remainder::kPad), huge / 2 + 1);  // no overflow rounding up
}

TEST(EpochPlanElastic, TheGlobalSequenceDoesNotDependOnTheWorldSize) {
  auto shards = Shards({50, 50, 37, 50, 13, 50}, 1000);
  PlanOptions o;
  o.seed = 3;
  o.epoch = 2;
  o.chunk_bytes = 9000;
  auto single = EpochPlan::Make(shards, o);
  ASSERT_TRUE(single.ok());
  std::map<uint64_t, SampleRef> sequence;  // global position -> sample
  for (size_t i = 0; i < single->positions().size(); ++i) sequence[single->positions()[i]] = single->order()[i];
  ASSERT_EQ(sequence.size(), 250u);
  for (int world : {2, 3, 4, 8}) {
    o.world_size = world;
    for (int rank = 0; rank < world; ++rank) {
      o.rank = rank;
      auto plan = EpochPlan::Make(shards, o);
      ASSERT_TRUE(plan.ok());
      for (size_t i = 0; i < plan->positions().size(); ++i) {
        EXPECT_EQ(plan->order()[i], sequence[plan->positions()[i]]) << "world " << world << " rank " << rank;
      }
    }
  }
}

TEST(EpochPlanElastic, SavedAtFourResumedAtThreeReadsEachRemainingSampleOnce) {
  auto shards = Shards({50, 50, 50, 50, 50, 50}, 1000);
  PlanOptions o;
  o.world_size = 4;
  o.seed = 11;
  o.chunk_bytes = 7000;
  std::set<std::pair<uint32_t, uint32_t>> seen;
  RankSplit split;
  for (int rank = 0; rank < 4; ++rank) {
    o.rank = rank;
    auto plan = EpochPlan::Make(shards, o);
    ASSERT_TRUE(plan.ok());
    for (int i = 0; i < 30; ++i) EXPECT_TRUE(seen.insert({plan->order()[i].shard, plan->order()[i].index}).second);
    split = plan->split();
  }
  auto rest = split.After(30);
  ASSERT_TRUE(rest.ok());
  o.world_size = 3;
  for (int rank = 0; rank < 3; ++rank) {
    o.rank = rank;
    auto plan = EpochPlan::Make(shards, o, *rest);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->samples_per_rank(), 60u);
    for (const SampleRef& r : plan->order()) EXPECT_TRUE(seen.insert({r.shard, r.index}).second) << "replayed";
  }
  EXPECT_EQ(seen.size(), 300u);
}

}  // namespace
}  // namespace s3stream
