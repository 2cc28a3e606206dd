// Client lifetime against a real server: a client dropped while its requests are in flight, from
// the caller's thread and from the transport's own thread (when a request completing there holds
// the last reference), must neither crash nor leave a future unset.
#include <gtest/gtest.h>

#include <cstdlib>

#include "s3stream/client.h"

namespace s3stream {
namespace {

std::shared_ptr<Client> NewClient() {
  ClientConfig config;
  config.endpoint_url = std::getenv("S3STREAM_TEST_ENDPOINT");
  return Client::Create(config).value();
}

class ClientLifetime : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(std::getenv("S3STREAM_TEST_ENDPOINT"), nullptr) << "run through tests/cpp/with_moto.sh";
    auto store = NewClient()->Locate("s3://conformance/", /*need_key=*/false).value().store;
    ASSERT_TRUE(store->Put("lifetime.bin", Buffer::CopyOf(std::string(4 << 20, 'z'))).Take().ok());
  }
};

TEST_F(ClientLifetime, LastReferenceDroppedWhileRequestsRun) {
  for (int round = 0; round < 20; ++round) {
    std::vector<Future<Result<Buffer>>> gets;
    {
      auto client = NewClient();
      auto store = client->Locate("s3://conformance/", /*need_key=*/false).value().store;
      for (int i = 0; i < 8; ++i) gets.push_back(GetBuffer(*store, "lifetime.bin"));
    }  // client and store gone: the requests hold the last references
    for (auto& g : gets) {
      ASSERT_TRUE(g.WaitFor(std::chrono::seconds(30))) << "a future was never set";
      const Result<Buffer>& r = g.Wait();
      if (r.ok()) {
        EXPECT_EQ(r->size(), 4u << 20);
      }
    }
  }
}

TEST_F(ClientLifetime, DestroyedFromTheCallerCancelsPromptly) {
  auto client = NewClient();
  auto store = client->Locate("s3://conformance/", /*need_key=*/false).value().store;
  std::vector<Future<Result<Buffer>>> gets;
  for (int i = 0; i < 16; ++i) gets.push_back(GetBuffer(*store, "lifetime.bin"));
  // Hold the futures, drop every owner of the transport except the in-flight requests.
  store.reset();
  client.reset();
  for (auto& g : gets) {
    ASSERT_TRUE(g.WaitFor(std::chrono::seconds(30)));
    const Result<Buffer>& r = g.Wait();
    EXPECT_TRUE(r.ok() || r.status().code() == StatusCode::kCancelled) << r.status().ToString();
  }
}

}  // namespace
}  // namespace s3stream
