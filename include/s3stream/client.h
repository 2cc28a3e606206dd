// Client: the entry point of the C++ API. Resolves configuration once, owns the HTTP transport
// (one event-loop thread), and hands out a store per bucket.
//
// Threading: thread-safe. Stores returned by StoreFor() keep the transport alive; the Client may be
// destroyed before them.
//
//   auto client = s3stream::Client::Create({}).value();
//   auto uri = s3stream::ObjectUri::Parse("s3://bucket/key").value();
//   auto data = s3stream::GetBuffer(*client->StoreFor(uri), uri.key).Take();
#pragma once

#include <map>
#include <memory>
#include <mutex>

#include "s3stream/config.h"
#include "s3stream/object_store.h"
#include "s3stream/uri.h"

namespace s3stream {

namespace internal {
struct S3Context;
}

class Client {
 public:
  static Result<std::shared_ptr<Client>> Create(const ClientConfig& config, const Environment& env = Environment::Process());

  // The store that holds `uri`: one per S3 bucket (cached), or the local file system for file URIs.
  std::shared_ptr<ObjectStore> StoreFor(const ObjectUri& uri);

  const ResolvedConfig& config() const;

 private:
  explicit Client(std::shared_ptr<const internal::S3Context> ctx);

  std::shared_ptr<const internal::S3Context> ctx_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<ObjectStore>> buckets_;
  std::shared_ptr<ObjectStore> files_;
};

}  // namespace s3stream
