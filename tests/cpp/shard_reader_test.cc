// The shard pipeline over the file driver: index building, and ShardSampleReader delivering an
// epoch plan's samples exactly once, in plan order, with the right bytes.
#include <gtest/gtest.h>

#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "delegating_store.h"
#include "test_dir.h"
#include "s3stream/shard_index.h"
#include "s3stream/shard_reader.h"
#include "s3stream/tar.h"
#include "store/file/file_store.h"

namespace s3stream {
namespace {

namespace fs = std::filesystem;

std::string Payload(int shard, int i) {
  // Varying sizes, so samples straddle pieces and chunks unevenly.
  return std::string(1000 + (shard * 7919 + i * 104729) % 30000, static_cast<char>('a' + (shard + i) % 26));
}

class ShardPipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::FreshTestDir("s3stream-shards");
    store_ = MakeFileStore(root_.string());
  }
  void TearDown() override { fs::remove_all(root_); }

  // A shard of `n` samples, each a .txt and a .cls member.
  std::string MakeShard(int shard, int n, bool gzip = false) {
    std::string tar;
    TarWriter writer([&](std::span<const uint8_t> b) {
      tar.append(reinterpret_cast<const char*>(b.data()), b.size());
      return Status::Ok();
    });
    for (int i = 0; i < n; ++i) {
      std::string key = "s" + std::to_string(shard) + "/sample" + std::to_string(i);
      EXPECT_TRUE(writer.Add(key + ".txt", Payload(shard, i)).ok());
      EXPECT_TRUE(writer.Add(key + ".cls", std::to_string(i % 10)).ok());
    }
    EXPECT_TRUE(writer.Finish().ok());
    std::string name = "shard-" + std::to_string(shard) + (gzip ? ".tar.gz" : ".tar");
    std::string bytes = gzip ? Gzip(tar) : tar;
    std::ofstream(root_ / name, std::ios::binary).write(bytes.data(), bytes.size());
    return name;
  }

  static std::string Gzip(const std::string& in) {
    z_stream z{};
    deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
    std::string out(deflateBound(&z, in.size()) + 64, '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z.avail_in = in.size();
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = out.size();
    deflate(&z, Z_FINISH);
    out.resize(z.total_out);
    deflateEnd(&z);
    return out;
  }

  // A shard as the pipeline sees it: where it is and its index.
  struct Shard {
    ShardLocation location;
    ShardLayout layout;
  };

  Shard Index(const std::string& name) {
    ReaderOptions small;
    small.chunk_size = 64 << 10;  // many chunks per shard
    ShardIndex index = BuildShardIndex(store_, name, small).value();
    return Shard{ShardLocation{store_, name, store_->Describe(name), index.object.etag},
                 ShardLayout{index.offsets, !index.gzip}};
  }

  static std::shared_ptr<const ShardSet> Set(const std::vector<Shard>& shards) {
    std::vector<ShardLocation> locations;
    std::vector<ShardLayout> layouts;
    for (const Shard& s : shards) {
      locations.push_back(s.location);
      layouts.push_back(s.layout);
    }
    return std::make_shared<const ShardSet>(std::move(locations), std::move(layouts));
  }

  fs::path root_;
  std::shared_ptr<ObjectStore> store_;
};

TEST_F(ShardPipelineTest, IndexFindsEverySample) {
  std::string name = MakeShard(0, 37);
  ShardIndex index = BuildShardIndex(store_, name).value();
  ASSERT_EQ(index.offsets.size(), 38u);
  EXPECT_EQ(index.offsets[0], 0u);
  EXPECT_EQ(index.keys[5], "s0/sample5");
  EXPECT_FALSE(index.gzip);
  // Each offset is a header boundary where the sample's first member starts.
  for (size_t i = 1; i < index.offsets.size(); ++i) EXPECT_EQ(index.offsets[i] % 512, 0u);
  ShardIndex gz = BuildShardIndex(store_, MakeShard(1, 9, /*gzip=*/true)).value();
  EXPECT_TRUE(gz.gzip);
  EXPECT_EQ(gz.keys.size(), 9u);
}

TEST_F(ShardPipelineTest, IndexOfANonTarObjectIsCorrupt) {
  std::ofstream(root_ / "photo.tar", std::ios::binary) << std::string("\xff\xd8\xff\xe0 JFIF not a tar", 19)
                                                       << std::string(2000, 'x');
  Result<ShardIndex> index = BuildShardIndex(store_, "photo.tar");
  ASSERT_FALSE(index.ok());
  EXPECT_EQ(index.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(index.status().message().find("not a tar archive"), std::string::npos) << index.status().message();
}

struct Layout {
  std::vector<int> samples;  // per shard
  int world, workers, batch;
  bool gzip_last;
};

class ExactlyOnceRead : public ShardPipelineTest, public ::testing::WithParamInterface<Layout> {};

TEST_P(ExactlyOnceRead, EveryRankAndWorkerTogetherReadEachSampleOnce) {
  const Layout& l = GetParam();
  std::vector<Shard> shards;
  for (size_t s = 0; s < l.samples.size(); ++s) {
    shards.push_back(Index(MakeShard(s, l.samples[s], l.gzip_last && s + 1 == l.samples.size())));
  }
  auto set = Set(shards);
  std::map<std::string, int> seen;
  size_t per_rank = 0;
  for (int rank = 0; rank < l.world; ++rank) {
    PlanOptions o;
    o.world_size = l.world;
    o.rank = rank;
    o.batch_size = l.batch;
    o.chunk_bytes = 40'000;
    o.seed = 3;
    EpochPlan plan = EpochPlan::Make(set->layouts(), o).value();
    per_rank = plan.samples_per_rank();
    std::vector<uint64_t> delivered_positions;
    for (int w = 0; w < l.workers; ++w) {
      ShardReaderOptions ro;
      ro.piece_size = 16 << 10;  // runs split into several pieces
      ro.max_bytes_ahead = 100 << 10;
      ShardSampleReader reader(set, plan, w, l.workers, 0, 0, ro);
      for (;;) {
        auto next = reader.Next();
        ASSERT_TRUE(next.ok()) << next.status().ToString();
        if (!*next) break;
        const PlannedSample& ps = **next;
        const SampleRef ref = plan.order()[ps.position];
        EXPECT_EQ(ps.shard, ref.shard);
        EXPECT_EQ(ps.sample.key, "s" + std::to_string(ref.shard) + "/sample" + std::to_string(ref.index));
        const Buffer* txt = ps.sample.Find("txt");
        ASSERT_NE(txt, nullptr);
        EXPECT_EQ(txt->view(), Payload(ref.shard, ref.index));
        ++seen[ps.sample.key];
        delivered_positions.push_back(ps.position);
      }
    }
    EXPECT_EQ(delivered_positions.size(), per_rank);
  }
  int total = 0;
  for (int n : l.samples) total += n;
  EXPECT_EQ(seen.size(), per_rank * l.world);  // drop: everything but the remainder
  EXPECT_LE(total - static_cast<int>(seen.size()), l.world - 1);
  for (auto& [key, n] : seen) EXPECT_EQ(n, 1) << key;
}

INSTANTIATE_TEST_SUITE_P(Layouts, ExactlyOnceRead,
                         ::testing::Values(Layout{{40, 33, 27}, 2, 3, 4, false},  // 3 shards, 6 readers
                                           Layout{{61}, 2, 3, 5, false},          // one shard, 6 readers
                                           Layout{{20, 20, 9}, 1, 1, 1, false},
                                           Layout{{25, 14}, 2, 2, 8, true}));     // with a .tar.gz

// A consumer that keeps finding its data still on the wire widens the read-ahead window; one that
// is slower than the network widens it once, for its first batch (which always waits), and no more.
TEST_F(ShardPipelineTest, ReadAheadWindowGrowsOnlyWhenTheConsumerWaits) {
  const Shard base = Index(MakeShard(0, 400));
  auto run = [&](std::chrono::milliseconds consumer_delay) {
    auto slow = std::make_shared<testing::DelegatingStore>(store_);
    slow->get_delay_ms = 20;
    Shard shard = base;
    shard.location.store = slow;
    auto set = Set({shard});
    PlanOptions o;
    o.shuffle = false;
    o.batch_size = 10;
    EpochPlan plan = EpochPlan::Make(set->layouts(), o).value();
    ShardReaderOptions ro;
    ro.piece_size = 256 << 10;  // initial window: two pieces, about three batches
    ro.max_bytes_ahead = 8 << 20;
    ShardSampleReader reader(set, plan, 0, 1, 0, 0, ro);
    size_t n = 0;
    for (;;) {
      auto next = reader.Next();
      EXPECT_TRUE(next.ok()) << next.status().ToString();
      if (!next.ok() || !*next) break;
      if (++n % 10 == 0) std::this_thread::sleep_for(consumer_delay);
    }
    EXPECT_EQ(n, 400u);
    return reader.stats();
  };
  ShardReaderStats fast = run(std::chrono::milliseconds(0));
  EXPECT_GT(fast.stalls, 1u);
  EXPECT_GT(fast.window_bytes, uint64_t{1} << 20);
  ShardReaderStats slow = run(std::chrono::milliseconds(60));  // slower than 20 ms per request
  EXPECT_EQ(slow.window_bytes, uint64_t{1} << 20);
  EXPECT_EQ(slow.stalls, 1u);
}

TEST_F(ShardPipelineTest, ChangedShardIsDetected) {
  auto set = Set({Index(MakeShard(0, 20))});
  MakeShard(0, 25);  // rewritten: new ETag
  PlanOptions o;
  EpochPlan plan = EpochPlan::Make(set->layouts(), o).value();
  ShardSampleReader reader(set, plan, 0, 1, 0);
  auto next = reader.Next();
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), StatusCode::kPreconditionFailed);
  EXPECT_NE(next.status().message().find("rebuild its index (s3stream index "), std::string::npos)
      << next.status().message();
  EXPECT_EQ(reader.Next().status().code(), StatusCode::kPreconditionFailed);  // sticky
}

TEST_F(ShardPipelineTest, StaleIndexWithoutEtagIsCorrupt) {
  Shard shard = Index(MakeShard(0, 20));
  shard.location.etag.clear();
  for (auto& o : shard.layout.offsets) o += 512;  // an index for some other layout
  shard.layout.offsets[0] = 0;
  auto set = Set({shard});
  PlanOptions o;
  o.shuffle = false;
  EpochPlan plan = EpochPlan::Make(set->layouts(), o).value();
  ShardSampleReader reader(set, plan, 0, 1, 0);
  Status status;
  for (;;) {
    auto next = reader.Next();
    if (!next.ok()) {
      status = next.status();
      break;
    }
    if (!*next) break;
  }
  EXPECT_EQ(status.code(), StatusCode::kCorrupt);
  EXPECT_NE(status.message().find("rebuild the index"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace s3stream
