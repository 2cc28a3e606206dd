// The Client over the file driver: drivers chosen by URI scheme, the store wrapper hook, and that a
// wrapper sees every byte each reader fetches (Get, GetMany, OpenReader, the shard index builder,
// ShardSampleReader), which is what a disk cache plugged in there relies on.
#include "s3stream/client.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "s3stream/shard_index.h"
#include "s3stream/shard_reader.h"
#include "s3stream/shard_set.h"
#include "s3stream/tar.h"
#include "delegating_store.h"
#include "store/file/file_store.h"
#include "test_dir.h"

namespace s3stream {
namespace {

namespace fs = std::filesystem;

using testing::DelegatingStore;

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::FreshTestDir("s3stream-client");
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string Uri(const std::string& name) const { return "file://" + (root_ / name).string(); }

  std::string Write(const std::string& name, size_t size, unsigned seed = 1) {
    std::string data(size, '\0');
    std::mt19937 rng(seed);
    for (auto& c : data) c = static_cast<char>(rng());
    std::ofstream(root_ / name, std::ios::binary).write(data.data(), data.size());
    return data;
  }

  // A client whose every store is wrapped in a counting DelegatingStore; `counter` receives it.
  std::shared_ptr<Client> CountingClient(std::shared_ptr<DelegatingStore>* counter) {
    ClientHooks hooks;
    hooks.wrappers.push_back([counter](std::shared_ptr<ObjectStore> inner) {
      *counter = std::make_shared<DelegatingStore>(std::move(inner));
      return std::shared_ptr<ObjectStore>(*counter);
    });
    return Client::Create({}, Environment::Process(), std::move(hooks)).value();
  }

  fs::path root_;
};

TEST_F(ClientTest, AnUnregisteredSchemeIsRefusedNamingTheSupportedOnes) {
  auto client = Client::Create({}).value();
  Result<Client::Location> where = client->Locate("gs://bucket/key");
  ASSERT_EQ(where.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(where.status().message().find("unsupported scheme 'gs://'"), std::string::npos) << where.status().message();
  EXPECT_NE(where.status().message().find("file://, s3://"), std::string::npos) << where.status().message();
  EXPECT_EQ(client->Get("gs://bucket/key").Take().status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ClientTest, ABucketWithoutAKeyIsNotAnObject) {
  auto client = Client::Create({}).value();
  Result<Client::Location> where = client->Locate("s3://bucket/");
  ASSERT_EQ(where.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(where.status().message().find("names a bucket, not an object"), std::string::npos);
  EXPECT_TRUE(client->Locate("s3://bucket/", /*need_key=*/false).ok());  // fine for a listing
}

TEST_F(ClientTest, AnotherDriverRegistersUnderItsScheme) {
  const std::string data = Write("obj", 1000);
  ClientHooks hooks;
  std::vector<std::string> containers;
  hooks.drivers["mem"] = [&](const ObjectUri& container) -> Result<std::shared_ptr<ObjectStore>> {
    containers.push_back(container.bucket);
    return std::shared_ptr<ObjectStore>(MakeFileStore(root_.string()));
  };
  auto client = Client::Create({}, Environment::Process(), std::move(hooks)).value();
  Result<Buffer> got = client->Get("mem://anything/obj").Take();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->view(), data);
  ASSERT_TRUE(client->Head("mem://anything/obj").Take().ok());
  EXPECT_EQ(containers, std::vector<std::string>{"anything"});  // one store per container, cached
}

TEST_F(ClientTest, WrappersApplyInOrderToEveryStoreOnce) {
  Write("obj", 10);
  std::vector<std::string> calls;
  ClientHooks hooks;
  hooks.wrappers.push_back([&](std::shared_ptr<ObjectStore> s) { calls.push_back("inner"); return s; });
  hooks.wrappers.push_back([&](std::shared_ptr<ObjectStore> s) { calls.push_back("outer"); return s; });
  auto client = Client::Create({}, Environment::Process(), std::move(hooks)).value();
  ASSERT_TRUE(client->Get(Uri("obj")).Take().ok());
  ASSERT_TRUE(client->Get(Uri("obj")).Take().ok());
  EXPECT_EQ(calls, (std::vector<std::string>{"inner", "outer"}));
}

TEST_F(ClientTest, AWrapperSeesEveryByteOfEveryReader) {
  std::shared_ptr<DelegatingStore> counter;
  auto client = CountingClient(&counter);
  auto expect_through_wrapper = [&](const char* reader, uint64_t delivered) {
    SCOPED_TRACE(reader);
    EXPECT_GT(counter->gets.load(), 0);
    EXPECT_EQ(counter->bytes.load(), delivered);
    counter->gets = 0;
    counter->bytes = 0;
  };

  // Client::Get of a large object: parallel pieces.
  const std::string big = Write("big", 3 * 1000 * 1000 + 7);
  Result<Buffer> got = client->Get(Uri("big"), std::nullopt, /*piece_size=*/1 << 20).Take();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->view(), big);
  EXPECT_EQ(counter->gets.load(), 3);
  expect_through_wrapper("Get", big.size());

  // GetMany: one object per sample (MapDataset).
  std::vector<std::string> uris;
  uint64_t many = 0;
  for (int i = 0; i < 20; ++i) {
    many += Write("s" + std::to_string(i), 100 + i, i).size();
    uris.push_back(Uri("s" + std::to_string(i)));
  }
  Result<std::vector<Buffer>> batch = client->GetMany(uris);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  expect_through_wrapper("GetMany", many);

  // OpenReader: open('rb').
  ReaderOptions small;
  small.chunk_size = 256 << 10;
  auto reader = client->OpenReader(Uri("big"), small).value();
  std::string read(big.size(), '\0');
  ASSERT_EQ(reader->Read({reinterpret_cast<uint8_t*>(read.data()), read.size()}).value(), big.size());
  ASSERT_EQ(read, big);
  reader.reset();
  expect_through_wrapper("OpenReader", big.size());

  // The shard index builder and the shard reader (ShardDataset).
  std::string tar;
  TarWriter writer([&](std::span<const uint8_t> b) {
    tar.append(reinterpret_cast<const char*>(b.data()), b.size());
    return Status::Ok();
  });
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(writer.Add("k" + std::to_string(i) + ".bin", std::string(3000 + i, 'x')).ok());
  ASSERT_TRUE(writer.Finish().ok());
  std::ofstream(root_ / "shard.tar", std::ios::binary).write(tar.data(), tar.size());
  Client::Location where = client->Locate(Uri("shard.tar")).value();
  ShardIndex index = BuildShardIndex(where.store, where.key).value();
  expect_through_wrapper("BuildShardIndex", tar.size());

  auto shards = ShardSet::Make(*client, {ShardEntry{Uri("shard.tar"), index.object.etag, index.offsets, false}}).value();
  PlanOptions plan_options;
  plan_options.batch_size = 8;
  EpochPlan plan = EpochPlan::Make(shards->layouts(), plan_options).value();
  ShardSampleReader samples(shards, plan, 0, 1, 0);
  int n = 0;
  for (auto next = samples.Next(); next.ok() && *next; next = samples.Next()) ++n;
  EXPECT_EQ(n, 50);
  expect_through_wrapper("ShardSampleReader", index.offsets.back() - index.offsets.front());
}

TEST_F(ClientTest, AShardSetRefusesACorruptIndex) {
  auto client = Client::Create({}).value();
  auto made = ShardSet::Make(*client, {ShardEntry{Uri("x.tar"), "", {0, 1024, 512}, false}});
  ASSERT_EQ(made.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(made.status().message().find("x.tar"), std::string::npos);
  EXPECT_NE(made.status().message().find("rebuild it"), std::string::npos) << made.status().message();
  EXPECT_EQ(ShardSet::Make(*client, {ShardEntry{Uri("y.tar"), "", {}, false}}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace s3stream
