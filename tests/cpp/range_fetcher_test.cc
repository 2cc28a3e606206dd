// The range engine over the file driver (through a DelegatingStore that can delay and count GETs):
// pieces in order and complete, the read-ahead window and its bound, learning an open range's
// size, the ETag pin, cancellation on Restart, and the shared BufferPool.
#include "s3stream/range_fetcher.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "delegating_store.h"
#include "test_dir.h"
#include "store/file/file_store.h"

namespace s3stream {
namespace {

namespace fs = std::filesystem;
using testing::DelegatingStore;

class RangeFetcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::FreshTestDir("s3stream-fetch");
    store_ = std::make_shared<DelegatingStore>(MakeFileStore(root_.string()));
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string Write(const std::string& key, size_t size, unsigned seed = 1) {
    std::string data(size, '\0');
    std::mt19937 rng(seed);
    for (auto& c : data) c = static_cast<char>(rng());
    std::ofstream(root_ / key, std::ios::binary).write(data.data(), data.size());
    return data;
  }

  FetchRange Range(const std::string& key, uint64_t start, std::optional<uint64_t> end, std::string etag = "") {
    FetchRange r;
    r.store = store_;
    r.key = key;
    r.start = start;
    r.end = end;
    r.etag = std::move(etag);
    return r;
  }

  // A source handing out `ranges` in order.
  static RangeFetcher::Source From(std::vector<FetchRange> ranges) {
    auto left = std::make_shared<std::deque<FetchRange>>(ranges.begin(), ranges.end());
    return [left]() -> std::optional<FetchRange> {
      if (left->empty()) return std::nullopt;
      FetchRange r = left->front();
      left->pop_front();
      return r;
    };
  }

  // Every piece, released as soon as it is taken; the bytes of each range concatenated.
  static std::vector<std::string> Drain(RangeFetcher& fetcher, Status* error = nullptr) {
    std::vector<std::string> out;
    for (;;) {
      Result<std::optional<FetchedPiece>> next = fetcher.Next();
      if (!next.ok()) {
        if (error) *error = next.status();
        return out;
      }
      if (!*next) return out;
      const FetchedPiece& p = **next;
      if (out.size() <= p.range) out.resize(p.range + 1);
      out[p.range] += std::string(p.data.view());
      fetcher.Release(p.data.size());
    }
  }

  fs::path root_;
  std::shared_ptr<DelegatingStore> store_;
};

TEST_F(RangeFetcherTest, DeliversEveryRangeInOrderPieceByPiece) {
  const std::string a = Write("a", 10'000, 1);
  const std::string b = Write("b", 3'000, 2);
  FetchOptions o;
  o.piece_size = 1'000;
  RangeFetcher fetcher(From({Range("a", 123, 9'876), Range("b", 0, 3'000), Range("a", 0, 1)}), o);
  std::vector<std::pair<uint64_t, bool>> seen;  // (offset, last) of range 0's pieces
  std::vector<std::string> got;
  for (;;) {
    auto next = fetcher.Next();
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    if (!*next) break;
    if ((*next)->range == 0) seen.emplace_back((*next)->offset, (*next)->last_of_range);
    if (got.size() <= (*next)->range) got.resize((*next)->range + 1);
    got[(*next)->range] += std::string((*next)->data.view());
    fetcher.Release((*next)->data.size());
  }
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], a.substr(123, 9'876 - 123));
  EXPECT_EQ(got[1], b);
  EXPECT_EQ(got[2], a.substr(0, 1));
  ASSERT_EQ(seen.size(), 10u);  // 9,753 bytes in pieces of at most 1,000
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].first, 123 + 1'000 * i);
    EXPECT_EQ(seen[i].second, i + 1 == seen.size());
  }
  EXPECT_EQ(store_->gets.load(), 10 + 3 + 1);
}

TEST_F(RangeFetcherTest, AnOpenRangeLearnsItsSizeFromTheFirstPiece) {
  const std::string small = Write("small", 700, 3);
  const std::string big = Write("big", 4'500, 4);
  FetchOptions o;
  o.piece_size = 1'000;
  RangeFetcher fetcher(From({Range("small", 0, std::nullopt), Range("big", 100, std::nullopt)}), o);
  std::vector<std::string> got = Drain(fetcher);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], small);
  EXPECT_EQ(got[1], big.substr(100));
  EXPECT_EQ(store_->gets.load(), 1 + 5);  // no HEAD: the small object costs one GET
}

TEST_F(RangeFetcherTest, ReadAheadStaysWithinTheWindowAndGrowsOnlyWhileTheConsumerWaits) {
  Write("obj", 100'000);
  store_->get_delay_ms = 10;
  FetchOptions o;
  o.piece_size = 1'000;
  o.initial_window = 2'000;
  o.max_window = 6'000;
  RangeFetcher fetcher(From({Range("obj", 0, 100'000)}), o);
  std::vector<std::string> got = Drain(fetcher);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].size(), 100'000u);
  EXPECT_EQ(fetcher.stats().window_bytes, 6'000u);  // the consumer kept waiting: the window grew to its bound
  EXPECT_LE(store_->max_inflight.load(), 6);        // ... and never past it
  EXPECT_GE(store_->max_inflight.load(), 4);
}

TEST_F(RangeFetcherTest, PiecesTheConsumerHoldsCountAgainstTheWindowButNeverStallIt) {
  // A consumer that keeps every piece of a range until its last one arrives (as the shard reader
  // keeps a batch): more than the window is held, and the next range still comes.
  Write("obj", 20'000);
  FetchOptions o;
  o.piece_size = 1'000;
  o.initial_window = 2'000;
  o.max_window = 2'000;
  RangeFetcher fetcher(From({Range("obj", 0, 8'000), Range("obj", 8'000, 20'000)}), o);
  uint64_t held = 0, delivered = 0;
  for (;;) {
    auto next = fetcher.Next();
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    if (!*next) break;
    held += (*next)->data.size();
    delivered += (*next)->data.size();
    if ((*next)->last_of_range) {
      fetcher.Release(held);
      held = 0;
    }
  }
  EXPECT_EQ(delivered, 20'000u);
  EXPECT_EQ(store_->gets.load(), 20);
}

TEST_F(RangeFetcherTest, AReplacedObjectFailsInsteadOfMixingVersionsAndTheFailureSticks) {
  Write("obj", 10'000, 5);
  store_->before_get = [this](int nth) {
    if (nth == 2) Write("obj", 10'000, 6);  // after the first piece pinned the ETag
  };
  FetchOptions o;
  o.piece_size = 1'000;
  RangeFetcher fetcher(From({Range("obj", 0, std::nullopt)}), o);  // no ETag given: the first response pins it
  Status error;
  Drain(fetcher, &error);
  EXPECT_EQ(error.code(), StatusCode::kPreconditionFailed) << error.ToString();
  EXPECT_EQ(fetcher.Next().status().code(), StatusCode::kPreconditionFailed);
}

TEST_F(RangeFetcherTest, RestartCancelsWhatIsInFlightAndReadsTheNewSource) {
  const std::string data = Write("obj", 50'000);
  store_->get_delay_ms = 30;
  FetchOptions o;
  o.piece_size = 1'000;
  o.initial_window = 8'000;
  RangeFetcher fetcher(From({Range("obj", 0, 50'000)}), o);
  auto first = fetcher.Next();
  ASSERT_TRUE(first.ok() && *first);
  EXPECT_EQ((*first)->offset, 0u);
  fetcher.Release((*first)->data.size());
  fetcher.Restart(From({Range("obj", 40'000, 41'000)}));
  EXPECT_EQ(fetcher.stats().window_bytes, 8'000u);
  std::vector<std::string> got = Drain(fetcher);
  ASSERT_EQ(got.size(), 2u);  // range numbers keep counting across a restart
  EXPECT_EQ(got[1], data.substr(40'000, 1'000));
}

TEST_F(RangeFetcherTest, SkipToDropsQueuedPiecesBeforeTheOffset) {
  const std::string data = Write("obj", 10'000);
  FetchOptions o;
  o.piece_size = 1'000;
  o.initial_window = 5'000;
  o.max_window = 5'000;
  RangeFetcher fetcher(From({Range("obj", 0, 10'000)}), o);
  auto first = fetcher.Next();  // pieces 0-4 requested
  ASSERT_TRUE(first.ok() && *first);
  fetcher.Release((*first)->data.size());
  EXPECT_TRUE(fetcher.SkipTo(3'500));
  auto next = fetcher.Next();
  ASSERT_TRUE(next.ok() && *next);
  EXPECT_EQ((*next)->offset, 3'000u);
  EXPECT_EQ(std::string((*next)->data.view()), data.substr(3'000, 1'000));
  fetcher.Release((*next)->data.size());
  EXPECT_FALSE(fetcher.SkipTo(9'500));  // pieces 4-7 are requested, not 9
}

TEST_F(RangeFetcherTest, PiecesDrawOnASharedPoolAndStayWithinIt) {
  Write("obj", 30'000);
  FetchOptions o;
  o.piece_size = 1'000;
  o.initial_window = 16'000;
  o.max_window = 16'000;
  o.pool = std::make_shared<BufferPool>(3'000);  // tighter than the window
  RangeFetcher fetcher(From({Range("obj", 0, 30'000)}), o);
  std::vector<std::string> got = Drain(fetcher);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].size(), 30'000u);
  EXPECT_LE(o.pool->peak(), 3'000u);
}

TEST_F(RangeFetcherTest, FetchWholeOfARangePastTheEndNamesTheObjectAndItsSize) {
  Write("obj", 5'000);
  FetchRange r = Range("obj", 0, 6'000);
  Result<Buffer> got = FetchWhole(r, 1'000).Take();
  ASSERT_EQ(got.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(got.status().message().find("obj"), std::string::npos);
  EXPECT_NE(got.status().message().find("5000 bytes"), std::string::npos) << got.status().message();
  r.clamp_end = true;
  got = FetchWhole(r, 1'000).Take();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->size(), 5'000u);
}

}  // namespace
}  // namespace s3stream
