#include "s3stream/client.h"

#include <algorithm>

#include "http/curl_transport.h"
#include "store/file/file_store.h"
#include "store/s3/s3_store.h"

namespace s3stream {
namespace {

// The built-in drivers: S3 (every bucket shares one transport and signer) and the local file system.
std::map<std::string, DriverFactory> BuiltInDrivers(std::shared_ptr<const internal::S3Context> s3) {
  std::map<std::string, DriverFactory> drivers;
  drivers["s3"] = [s3](const ObjectUri& container) -> Result<std::shared_ptr<ObjectStore>> {
    return std::shared_ptr<ObjectStore>(internal::MakeS3Store(s3, container.bucket));
  };
  drivers["file"] = [](const ObjectUri&) -> Result<std::shared_ptr<ObjectStore>> {
    return std::shared_ptr<ObjectStore>(MakeFileStore("/"));
  };
  return drivers;
}

template <typename T>
Future<T> Failed(const Status& status) {
  return Future<T>::Ready(T(status));
}

FetchRange WholeObject(Client::Location where) {
  FetchRange range;
  range.store = std::move(where.store);
  range.key = std::move(where.key);
  return range;
}

}  // namespace

Result<std::shared_ptr<Client>> Client::Create(const ClientConfig& config, const Environment& env, ClientHooks hooks) {
  S3S_ASSIGN_OR_RETURN(ResolvedConfig resolved, ResolveConfig(config, env));
  internal::CurlOptions curl;
  curl.max_connections = resolved.options.max_inflight;
  curl.connect_timeout_s = resolved.options.connect_timeout_s;
  curl.low_speed_limit = resolved.options.low_speed_limit;
  curl.low_speed_time_s = resolved.options.low_speed_time_s;
  curl.stall_timeout_s = resolved.options.stall_timeout_s;
  curl.verify_tls = resolved.options.verify_tls;
  curl.ca_bundle = resolved.options.ca_bundle.value_or("");
  std::shared_ptr<internal::Transport> transport = internal::MakeCurlTransport(curl);
  auto s3 = std::make_shared<const internal::S3Context>(std::move(resolved), std::move(transport));
  std::map<std::string, DriverFactory> drivers = BuiltInDrivers(s3);
  for (auto& [scheme, factory] : hooks.drivers) drivers[scheme] = std::move(factory);
  std::shared_ptr<const ResolvedConfig> resolved_config(s3, &s3->config);  // shares the context's lifetime
  return std::shared_ptr<Client>(new Client(std::move(resolved_config), std::move(drivers), std::move(hooks.wrappers)));
}

Client::Client(std::shared_ptr<const ResolvedConfig> config, std::map<std::string, DriverFactory> drivers,
               std::vector<StoreWrapper> wrappers)
    : config_(std::move(config)), drivers_(std::move(drivers)), wrappers_(std::move(wrappers)) {}

const ResolvedConfig& Client::config() const { return *config_; }

Result<std::shared_ptr<ObjectStore>> Client::StoreFor(const ObjectUri& uri) {
  const std::string container = uri.scheme + "://" + uri.bucket;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = stores_.find(container); it != stores_.end()) return it->second;
  auto driver = drivers_.find(uri.scheme);
  if (driver == drivers_.end()) {
    std::string supported;
    for (const auto& [scheme, factory] : drivers_) supported += scheme + "://, ";
    return InvalidArgument("invalid URI '" + uri.ToString() + "': unsupported scheme '" + uri.scheme + "://' (supported: " +
                           supported + "or a plain path), e.g. s3://my-bucket/train/0001.tar");
  }
  S3S_ASSIGN_OR_RETURN(std::shared_ptr<ObjectStore> store, driver->second(uri));
  for (const StoreWrapper& wrap : wrappers_) store = wrap(std::move(store));
  stores_.emplace(container, store);
  return store;
}

Result<Client::Location> Client::Locate(const std::string& uri, bool need_key) {
  S3S_ASSIGN_OR_RETURN(ObjectUri parsed, ObjectUri::Parse(uri));
  // A key ending in '/' is allowed: S3 "directory marker" objects are real objects.
  if (need_key && parsed.key.empty()) {
    return InvalidArgument("'" + uri + "' names a bucket, not an object: add the object's key, "
                           "e.g. s3://bucket/path/to/object");
  }
  S3S_ASSIGN_OR_RETURN(std::shared_ptr<ObjectStore> store, StoreFor(parsed));
  return Location{std::move(store), std::move(parsed.key)};
}

Future<Result<Buffer>> Client::Get(const std::string& uri, std::optional<ByteRange> range, uint64_t piece_size,
                                   std::shared_ptr<std::atomic<bool>> cancel) {
  Result<Location> where = Locate(uri);
  if (!where.ok()) return Failed<Result<Buffer>>(where.status());
  FetchRange fetch = WholeObject(std::move(where).value());
  fetch.cancel = std::move(cancel);
  if (range) {
    fetch.start = range->start;
    fetch.end = range->end;
  }
  return FetchWhole(std::move(fetch), piece_size, config_->options.max_get_bytes);
}

Result<std::vector<Buffer>> Client::GetMany(const std::vector<std::string>& uris) {
  std::vector<Location> located;
  located.reserve(uris.size());
  for (const std::string& uri : uris) {
    S3S_ASSIGN_OR_RETURN(Location where, Locate(uri));  // every URI checked before any request
    located.push_back(std::move(where));
  }
  // All requested before any is awaited, so they share the transport's requests in flight.
  std::vector<Future<Result<Buffer>>> pending;
  pending.reserve(located.size());
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  for (Location& where : located) {
    FetchRange range = WholeObject(std::move(where));
    range.cancel = cancel;
    pending.push_back(FetchWhole(std::move(range), /*piece_size=*/0, config_->options.max_get_bytes));
  }
  std::vector<Buffer> out;
  out.reserve(pending.size());
  Status first_error;
  for (auto& f : pending) {
    // Wait for all, even after a failure: no GET outlives the call. An interrupted wait cancels
    // the rest, which then end within about a second.
    if (first_error.code() != StatusCode::kCancelled && !f.WaitInterruptibly()) {
      cancel->store(true);
      first_error = Interrupted("get_many of " + std::to_string(uris.size()) + " objects");
    }
    Result<Buffer> r = f.Take();
    if (r.ok()) {
      out.push_back(std::move(r).value());
    } else if (first_error.ok()) {
      first_error = r.status();
    }
  }
  if (!first_error.ok()) return first_error;
  return out;
}

Future<Result<ObjectInfo>> Client::Head(const std::string& uri) {
  Result<Location> where = Locate(uri);
  if (!where.ok()) return Failed<Result<ObjectInfo>>(where.status());
  return where->store->Head(where->key);
}

Result<ListPager> Client::List(const std::string& uri, const std::string& delimiter, int max_keys) {
  S3S_ASSIGN_OR_RETURN(Location where, Locate(uri, /*need_key=*/false));
  return ListPager(std::move(where.store), ListRequest{std::move(where.key), delimiter, "", max_keys});
}

Result<std::unique_ptr<ParallelLister>> Client::ListParallel(const std::string& uri, ParallelListOptions options) {
  S3S_ASSIGN_OR_RETURN(Location where, Locate(uri, /*need_key=*/false));
  options.max_requests = std::min(options.max_requests, std::max(1, config_->options.max_inflight));
  return ParallelLister::Start(std::move(where.store), std::move(where.key), options);
}

Future<Result<std::string>> Client::Put(const std::string& uri, Buffer data) {
  Result<Location> where = Locate(uri);
  if (!where.ok()) return Failed<Result<std::string>>(where.status());
  return where->store->Put(where->key, std::move(data));
}

Future<Status> Client::Delete(const std::string& uri) {
  Result<Location> where = Locate(uri);
  if (!where.ok()) return Future<Status>::Ready(where.status());
  return where->store->Delete(where->key);
}

Result<std::vector<UploadInfo>> Client::ListUploads(const std::string& uri, int page_size) {
  S3S_ASSIGN_OR_RETURN(Location where, Locate(uri, /*need_key=*/false));
  return s3stream::ListUploads(*where.store, where.key, page_size);
}

Future<Status> Client::AbortUpload(const std::string& uri, const std::string& upload_id) {
  Result<Location> where = Locate(uri);
  if (!where.ok()) return Future<Status>::Ready(where.status());
  return where->store->AbortMultipartUpload(where->key, upload_id);
}

Result<std::unique_ptr<ObjectReader>> Client::OpenReader(const std::string& uri, ReaderOptions options) {
  S3S_ASSIGN_OR_RETURN(Location where, Locate(uri));
  return ObjectReader::Open(std::move(where.store), std::move(where.key), std::move(options));
}

Result<std::unique_ptr<ObjectWriter>> Client::OpenWriter(const std::string& uri, WriterOptions options) {
  S3S_ASSIGN_OR_RETURN(Location where, Locate(uri));
  return ObjectWriter::Create(std::move(where.store), std::move(where.key), options);
}

}  // namespace s3stream
