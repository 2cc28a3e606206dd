// Client: the entry point of the C++ API, and the one place where a URI becomes a store. It
// resolves the configuration once, owns the HTTP transport (one event-loop thread), and offers the
// URI-level operations every front end uses (the Python package, the command line, a C++ program).
//
// Drivers are chosen by URI scheme from a registry: `s3` (any S3-compatible store) and `file` (the
// local file system) are built in; ClientHooks adds others. Each store the client creates passes
// through the hooks' wrappers, decorators around any driver (a disk cache is one), so every byte a
// reader fetches goes through them.
//
// Threading: thread-safe. Stores returned by Locate() keep the transport alive; the Client may be
// destroyed before them.
//
//   auto client = s3stream::Client::Create({}).value();
//   s3stream::Buffer data = client->Get("s3://bucket/key").Take().value();
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "s3stream/config.h"
#include "s3stream/object_reader.h"
#include "s3stream/object_store.h"
#include "s3stream/object_writer.h"
#include "s3stream/parallel_list.h"
#include "s3stream/range_fetcher.h"
#include "s3stream/uri.h"

namespace s3stream {

// Makes the store for one bucket (or other top-level container) of a scheme.
using DriverFactory = std::function<Result<std::shared_ptr<ObjectStore>>(const ObjectUri& container)>;
// Wraps a store in a decorator: gets the driver's store (or the previous wrapper's), returns the
// store the client uses.
using StoreWrapper = std::function<std::shared_ptr<ObjectStore>(std::shared_ptr<ObjectStore>)>;

struct ClientHooks {
  std::map<std::string, DriverFactory> drivers;  // by scheme, beside (or replacing) s3 and file
  std::vector<StoreWrapper> wrappers;            // applied in order: the first is innermost
};

class Client {
 public:
  static Result<std::shared_ptr<Client>> Create(const ClientConfig& config,
                                                const Environment& env = Environment::Process(),
                                                ClientHooks hooks = {});

  const ResolvedConfig& config() const;

  // Where a URI's object lives: its store (one per bucket, cached) and its key there.
  struct Location {
    std::shared_ptr<ObjectStore> store;
    std::string key;
  };
  // `need_key` rejects a URI that names a bucket but no object.
  Result<Location> Locate(const std::string& uri, bool need_key = true);

  // The object, or bytes [range.start, range.end), as one Buffer; more than piece_size bytes
  // arrive as parallel ranged GETs pinned to the first response's ETag (FetchWhole). Setting
  // `cancel` stops it.
  Future<Result<Buffer>> Get(const std::string& uri, std::optional<ByteRange> range = std::nullopt,
                             uint64_t piece_size = kDefaultPieceSize,
                             std::shared_ptr<std::atomic<bool>> cancel = nullptr);
  // Several whole objects, one GET each, all requested before any is awaited (the batch is the
  // parallelism); in the order given. Fails with the first failure, after every GET finished. An
  // interrupted wait (interrupt.h) cancels them all and fails with kCancelled.
  Result<std::vector<Buffer>> GetMany(const std::vector<std::string>& uris);
  Future<Result<ObjectInfo>> Head(const std::string& uri);
  // The objects under the URI's key (a prefix), page by page (ListPager: an endless listing is
  // refused).
  Result<ListPager> List(const std::string& uri, const std::string& delimiter = "", int max_keys = 1000);
  // Every object under the URI's key, in key order, with up to options.max_requests LIST requests
  // in flight (parallel_list.h; capped at the configuration's max_inflight).
  Result<std::unique_ptr<ParallelLister>> ListParallel(const std::string& uri, ParallelListOptions options = {});
  Future<Result<std::string>> Put(const std::string& uri, Buffer data);  // the new ETag
  Future<Status> Delete(const std::string& uri);

  // The incomplete multipart uploads whose key starts with the URI's key, `page_size` per request
  // (ListUploads: an endless listing is refused), and aborting one by its object URI and id.
  Result<std::vector<UploadInfo>> ListUploads(const std::string& uri, int page_size = 1000);
  Future<Status> AbortUpload(const std::string& uri, const std::string& upload_id);

  // A seekable reader (HEADs the object) and a writer that commits on Close().
  Result<std::unique_ptr<ObjectReader>> OpenReader(const std::string& uri, ReaderOptions options = {});
  Result<std::unique_ptr<ObjectWriter>> OpenWriter(const std::string& uri, WriterOptions options = {});

 private:
  Client(std::shared_ptr<const ResolvedConfig> config, std::map<std::string, DriverFactory> drivers,
         std::vector<StoreWrapper> wrappers);
  Result<std::shared_ptr<ObjectStore>> StoreFor(const ObjectUri& uri);

  const std::shared_ptr<const ResolvedConfig> config_;
  const std::map<std::string, DriverFactory> drivers_;
  const std::vector<StoreWrapper> wrappers_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<ObjectStore>> stores_;  // by "scheme://bucket"
};

}  // namespace s3stream
