#include "s3stream/client.h"

#include "http/curl_transport.h"
#include "store/file_store.h"
#include "store/s3_store.h"

namespace s3stream {

Result<std::shared_ptr<Client>> Client::Create(const ClientConfig& config, const Environment& env) {
  S3S_ASSIGN_OR_RETURN(ResolvedConfig resolved, ResolveConfig(config, env));
  internal::CurlOptions curl;
  curl.max_connections = resolved.options.max_inflight;
  curl.connect_timeout_s = resolved.options.connect_timeout_s;
  curl.low_speed_limit = resolved.options.low_speed_limit;
  curl.low_speed_time_s = resolved.options.low_speed_time_s;
  curl.verify_tls = resolved.options.verify_tls;
  curl.ca_bundle = resolved.options.ca_bundle.value_or("");
  std::shared_ptr<internal::Transport> transport = internal::MakeCurlTransport(curl);
  auto ctx = std::make_shared<const internal::S3Context>(std::move(resolved), std::move(transport));
  return std::shared_ptr<Client>(new Client(std::move(ctx)));
}

Client::Client(std::shared_ptr<const internal::S3Context> ctx) : ctx_(std::move(ctx)) {}

const ResolvedConfig& Client::config() const { return ctx_->config; }

std::shared_ptr<ObjectStore> Client::StoreFor(const ObjectUri& uri) {
  std::lock_guard<std::mutex> lock(mu_);
  if (uri.scheme == Scheme::kFile) {
    if (!files_) files_ = MakeFileStore("/");
    return files_;
  }
  auto& store = buckets_[uri.bucket];
  if (!store) store = internal::MakeS3Store(ctx_, uri.bucket);
  return store;
}

}  // namespace s3stream
