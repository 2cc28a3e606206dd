// The store conformance suite against the S3 driver, through the production path (Client, libcurl,
// SigV4) to a real S3-compatible server: moto on loopback, started by with_moto.sh.
#include <cstdlib>

#include "s3stream/client.h"
#include "store_conformance.h"

namespace s3stream {
namespace {

std::shared_ptr<Client> TestClient() {
  static std::shared_ptr<Client> client = [] {
    const char* endpoint = std::getenv("S3STREAM_TEST_ENDPOINT");
    if (!endpoint) {
      std::fprintf(stderr, "S3STREAM_TEST_ENDPOINT is not set: run this test through tests/cpp/with_moto.sh\n");
      std::abort();
    }
    ClientConfig config;
    config.endpoint_url = endpoint;
    config.retry_base_delay_s = 0.01;
    auto created = Client::Create(config);
    if (!created.ok()) {
      std::fprintf(stderr, "%s\n", created.status().ToString().c_str());
      std::abort();
    }
    return *created;
  }();
  return client;
}

std::shared_ptr<ObjectStore> Bucket() { return TestClient()->Locate("s3://conformance/", /*need_key=*/false).value().store; }

void EmptyBucket() {
  auto store = Bucket();
  std::vector<std::string> keys;
  Status listed = ListEach(store, {}, [&](const ListPage& page) {
    for (const auto& o : page.objects) keys.push_back(o.key);
    return Status::Ok();
  });
  ASSERT_TRUE(listed.ok()) << listed.ToString();
  std::vector<Future<Status>> deletes;
  for (const auto& key : keys) deletes.push_back(store->Delete(key));
  for (auto& d : deletes) ASSERT_TRUE(d.Wait().ok()) << d.Wait().ToString();
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(S3, StoreConformanceTest,
                         ::testing::Values(StoreFactory{"S3", Bucket, EmptyBucket, 2500, 1000}), StoreFactoryName);

}  // namespace s3stream
