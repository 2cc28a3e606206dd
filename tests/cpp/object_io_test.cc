// ObjectReader and ObjectWriter over the file driver: correctness across chunk and part
// boundaries, read-ahead, the memory bound, and abort semantics.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "delegating_store.h"
#include "test_dir.h"
#include "s3stream/object_reader.h"
#include "s3stream/object_writer.h"
#include "s3stream/range_fetcher.h"
#include "store/file/file_store.h"

namespace s3stream {
namespace {

namespace fs = std::filesystem;
using testing::DelegatingStore;

class ObjectIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::FreshTestDir("s3stream-io");
    store_ = std::make_shared<DelegatingStore>(MakeFileStore(root_.string()));
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string WriteFile(const std::string& key, size_t size) {
    std::string data(size, '\0');
    std::mt19937 rng(static_cast<unsigned>(size));
    for (auto& c : data) c = static_cast<char>(rng());
    std::ofstream(root_ / key, std::ios::binary).write(data.data(), data.size());
    return data;
  }

  std::string ReadFile(const std::string& key) {
    std::ifstream in(root_ / key, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  fs::path root_;
  std::shared_ptr<DelegatingStore> store_;
};

FetchRange Whole(std::shared_ptr<ObjectStore> store, std::string key) {
  FetchRange range;
  range.store = std::move(store);
  range.key = std::move(key);
  return range;
}

TEST_F(ObjectIoTest, FetchWholeFetchesThePiecesAtOnce) {
  const std::string data = WriteFile("obj", 700'001);
  store_->get_delay_ms = 50;
  Result<Buffer> got = FetchWhole(Whole(store_, "obj"), 100'000).Take();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->view(), data);
  EXPECT_EQ(store_->gets.load(), 8);  // the first part, then 7 more
  EXPECT_GE(store_->max_inflight.load(), 7);  // all requested as soon as the size was known
}

TEST_F(ObjectIoTest, FetchWholeFailsWhenTheObjectIsReplacedBetweenPieces) {
  WriteFile("obj", 500'000);
  store_->before_get = [this](int nth) {
    if (nth == 2) WriteFile("obj", 500'001);  // after the first part pinned the ETag
  };
  Result<Buffer> got = FetchWhole(Whole(store_, "obj"), 100'000).Take();
  EXPECT_EQ(got.status().code(), StatusCode::kPreconditionFailed) << got.status().ToString();
}

TEST_F(ObjectIoTest, FetchWholeOfAGivenRangeIsPinnedToo) {
  WriteFile("obj", 500'000);
  store_->before_get = [this](int nth) {
    if (nth == 2) WriteFile("obj", 500'000);  // same size, new version
  };
  FetchRange range = Whole(store_, "obj");
  range.start = 1000;
  range.end = 400'000;
  Result<Buffer> got = FetchWhole(range, 100'000).Take();
  EXPECT_EQ(got.status().code(), StatusCode::kPreconditionFailed) << got.status().ToString();
}

TEST_F(ObjectIoTest, FetchWholeWithoutPiecesIsOneGet) {
  const std::string data = WriteFile("obj", 700'001);
  Result<Buffer> got = FetchWhole(Whole(store_, "obj"), /*piece_size=*/0).Take();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->view(), data);
  EXPECT_EQ(store_->gets.load(), 1);
}

TEST_F(ObjectIoTest, SequentialReadAcrossChunks) {
  const std::string data = WriteFile("obj", 10'500);
  ReaderOptions options;
  options.chunk_size = 1000;
  options.prefetch_chunks = 4;
  auto reader = ObjectReader::Open(store_, "obj", options);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  std::string out;
  std::vector<uint8_t> piece(333);
  for (;;) {
    Result<size_t> n = (*reader)->Read(piece);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    if (*n == 0) break;
    out.append(reinterpret_cast<char*>(piece.data()), *n);
  }
  EXPECT_EQ(out, data);
  EXPECT_EQ(store_->gets.load(), 11);  // each chunk fetched once
}

TEST_F(ObjectIoTest, ReadAheadGrowsWhileTheConsumerWaitsForTheNetwork) {
  WriteFile("obj", 64 * 1000);
  store_->get_delay_ms = 20;  // a time to first byte the consumer keeps running into
  ReaderOptions options;
  options.chunk_size = 1000;
  options.prefetch_chunks = 8;
  auto reader = std::move(ObjectReader::Open(store_, "obj", options).value());
  std::vector<uint8_t> piece(1000);
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(reader->Read(piece).ok());
  // The window doubled from 2 chunks to its bound of 1 + 8: more chunks requested than consumed.
  EXPECT_EQ(reader->stats().window_bytes, 9000u);
  EXPECT_GT(store_->gets.load(), 8);
  EXPECT_GE(store_->max_inflight.load(), 5);
}

TEST_F(ObjectIoTest, ReadAheadStaysSmallForAConsumerSlowerThanTheNetwork) {
  WriteFile("obj", 10 * 1000);
  store_->get_delay_ms = 10;
  ReaderOptions options;
  options.chunk_size = 1000;
  options.prefetch_chunks = 8;
  auto reader = std::move(ObjectReader::Open(store_, "obj", options).value());
  std::vector<uint8_t> piece(1000);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(reader->Read(piece).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(40));  // slower than a request
  }
  EXPECT_EQ(reader->stats().stalls, 1u);  // the first chunk only
  EXPECT_EQ(reader->stats().window_bytes, 4000u);
  EXPECT_EQ(store_->gets.load(), 10);
}

TEST_F(ObjectIoTest, ForwardSeekWithinTheReadAheadKeepsIt) {
  const std::string data = WriteFile("obj", 30 * 1000);
  store_->get_delay_ms = 20;  // the first read waits: the window doubles to 4 chunks
  ReaderOptions options;
  options.chunk_size = 1000;
  options.prefetch_chunks = 8;
  auto reader = std::move(ObjectReader::Open(store_, "obj", options).value());
  std::vector<uint8_t> buf(10);
  ASSERT_TRUE(reader->Read(buf).ok());  // chunks 0 and 1 requested
  reader->Seek(1500);                   // inside chunk 1: no new request for it
  ASSERT_EQ(reader->Read(buf).value(), 10u);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(buf.data()), 10), data.substr(1500, 10));
  EXPECT_EQ(store_->gets.load(), 5);  // chunks 0-1, then 2-4 as the window (doubled by the first wait) refills
}

TEST_F(ObjectIoTest, RandomSeeksMatchTheSource) {
  const std::string data = WriteFile("obj", 50'000);
  ReaderOptions options;
  options.chunk_size = 4096;
  auto reader = std::move(ObjectReader::Open(store_, "obj", options).value());
  std::mt19937 rng(1);
  for (int i = 0; i < 200; ++i) {
    uint64_t pos = rng() % 52'000;  // sometimes past the end
    size_t len = rng() % 9000;
    reader->Seek(pos);
    std::vector<uint8_t> buf(len);
    size_t n = reader->Read(buf).value();
    size_t expected = pos >= data.size() ? 0 : std::min<size_t>(len, data.size() - pos);
    ASSERT_EQ(n, expected) << "pos " << pos << " len " << len;
    ASSERT_EQ(std::string(reinterpret_cast<char*>(buf.data()), n), data.substr(std::min<size_t>(pos, data.size()), n));
  }
}

TEST_F(ObjectIoTest, MemoryStaysWithinTheSharedPool) {
  WriteFile("obj", 200'000);
  ReaderOptions options;
  options.chunk_size = 1000;
  options.prefetch_chunks = 64;
  options.pool = std::make_shared<BufferPool>(5000);
  auto reader = std::move(ObjectReader::Open(store_, "obj", options).value());
  std::vector<uint8_t> all(200'000);
  ASSERT_EQ(reader->Read(all).value(), 200'000u);
  EXPECT_LE(options.pool->peak(), 5000u);
}

TEST_F(ObjectIoTest, ReplacedObjectFailsInsteadOfMixingVersions) {
  WriteFile("obj", 100'000);
  ReaderOptions options;
  options.chunk_size = 1000;
  options.prefetch_chunks = 0;
  auto reader = std::move(ObjectReader::Open(store_, "obj", options).value());
  std::vector<uint8_t> buf(10);
  ASSERT_TRUE(reader->Read(buf).ok());
  ASSERT_TRUE(store_->Put("obj", Buffer::CopyOf(std::string_view("replaced"))).Take().ok());
  reader->Seek(50'000);
  Result<size_t> n = reader->Read(buf);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), StatusCode::kPreconditionFailed);
}

TEST_F(ObjectIoTest, SmallWriteIsOnePut) {
  auto writer = std::move(ObjectWriter::Create(store_, "small", {}).value());
  ASSERT_TRUE(writer->Write(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>("hello"), 5)).ok());
  EXPECT_FALSE(fs::exists(root_ / "small"));  // not visible before close
  ASSERT_TRUE(writer->Close().ok());
  EXPECT_EQ(ReadFile("small"), "hello");
  EXPECT_FALSE(fs::exists(root_ / ".s3stream-multipart"));
}

TEST_F(ObjectIoTest, EmptyWriteCreatesAnEmptyObject) {
  auto writer = std::move(ObjectWriter::Create(store_, "empty", {}).value());
  ASSERT_TRUE(writer->Close().ok());
  EXPECT_TRUE(fs::exists(root_ / "empty"));
  EXPECT_EQ(fs::file_size(root_ / "empty"), 0u);
}

TEST_F(ObjectIoTest, LargeWriteUploadsPartsAndCommits) {
  std::string data(17 << 20, '\0');
  std::mt19937 rng(3);
  for (auto& c : data) c = static_cast<char>(rng());
  WriterOptions options;
  options.part_size = 5 << 20;
  auto writer = std::move(ObjectWriter::Create(store_, "big", options).value());
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  for (size_t off = 0; off < data.size(); off += 777'777) {
    size_t n = std::min<size_t>(777'777, data.size() - off);
    ASSERT_TRUE(writer->Write({p + off, n}).ok());
  }
  ASSERT_TRUE(writer->Close().ok());
  EXPECT_EQ(ReadFile("big"), data);
  EXPECT_EQ(store_->aborts.load(), 0);
}

TEST_F(ObjectIoTest, DroppedWriterLeavesNothing) {
  std::string data(12 << 20, 'x');
  {
    WriterOptions options;
    options.part_size = 5 << 20;
    auto writer = std::move(ObjectWriter::Create(store_, "dropped", options).value());
    ASSERT_TRUE(writer->Write({reinterpret_cast<const uint8_t*>(data.data()), data.size()}).ok());
  }  // no Close(): abort
  EXPECT_FALSE(fs::exists(root_ / "dropped"));
  EXPECT_EQ(store_->aborts.load(), 1);
  EXPECT_TRUE(!fs::exists(root_ / ".s3stream-multipart") || fs::is_empty(root_ / ".s3stream-multipart"));
}

TEST_F(ObjectIoTest, FailedPartAbortsAndReportsTheError) {
  store_->fail_upload_part = 2;
  std::string data(16 << 20, 'y');
  WriterOptions options;
  options.part_size = 5 << 20;
  auto writer = std::move(ObjectWriter::Create(store_, "failed", options).value());
  Status write = writer->Write({reinterpret_cast<const uint8_t*>(data.data()), data.size()});
  Status close = write.ok() ? writer->Close() : write;
  EXPECT_EQ(close.code(), StatusCode::kUnavailable);
  EXPECT_NE(close.message().find("part 2"), std::string::npos);
  EXPECT_FALSE(fs::exists(root_ / "failed"));
  EXPECT_EQ(store_->aborts.load(), 1);
}

TEST_F(ObjectIoTest, RejectsBadOptions) {
  WriterOptions tiny;
  tiny.part_size = 1 << 20;
  EXPECT_EQ(ObjectWriter::Create(store_, "k", tiny).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ObjectWriter::Create(store_, "", {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ObjectReader::Open(store_, "missing").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace s3stream
