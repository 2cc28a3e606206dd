// The driver-independent helpers declared in s3stream/object_store.h: one GET into one Buffer, a
// loop over List pages, and every page of a listing of multipart uploads.
#include "s3stream/object_store.h"

#include <set>
#include <string>
#include <utility>

#include "store/buffer_sink.h"

namespace s3stream {

Future<Result<Buffer>> GetBuffer(ObjectStore& store, const std::string& key, const GetOptions& options) {
  auto sink = std::make_shared<internal::BufferSink>(
      store.Describe(key), [object = store.Describe(key)](const GetStart& start) -> Result<Buffer> {
        Buffer buffer = Buffer::TryAllocate(start.content_length);
        if (!buffer.valid()) return TooLarge("not enough memory for the " + std::to_string(start.content_length) +
                                             " bytes of " + object);
        return buffer;
      });
  Promise<Result<Buffer>> promise;
  Future<Result<Buffer>> result = promise.future();
  store.Get(key, options, sink).Then([sink, promise](const Status& status) mutable {
    promise.Set(status.ok() ? sink->Finish() : Result<Buffer>(status));
  });
  return result;
}

ListPager::ListPager(std::shared_ptr<ObjectStore> store, ListRequest first)
    : store_(std::move(store)), request_(std::move(first)) {}

Result<std::optional<ListPage>> ListPager::Next() {
  if (done_) return std::optional<ListPage>();
  Result<ListPage> page = Await(store_->List(request_), "listing " + store_->Describe(request_.prefix));
  if (!page.ok()) return page.status();
  std::string& token = page->next_continuation_token;
  if (token.empty()) {
    done_ = true;
  } else if (!seen_tokens_.insert(token).second || token == request_.continuation_token) {
    done_ = true;
    return Corrupt("listing " + store_->Describe(request_.prefix) + ": the store handed out the continuation token '" +
                   token.substr(0, 80) + "' a second time, which would make the listing endless");
  } else {
    request_.continuation_token = token;
  }
  return std::optional<ListPage>(std::move(page).value());
}

Status ListEach(std::shared_ptr<ObjectStore> store, ListRequest request,
                const std::function<Status(const ListPage&)>& on_page) {
  ListPager pager(std::move(store), std::move(request));
  while (true) {
    S3S_ASSIGN_OR_RETURN(std::optional<ListPage> page, pager.Next());
    if (!page) return Status::Ok();
    S3S_RETURN_IF_ERROR(on_page(*page));
  }
}

Result<std::vector<UploadInfo>> ListUploads(ObjectStore& store, const std::string& prefix, int page_size) {
  const std::string what = "listing the multipart uploads under " + store.Describe(prefix);
  UploadListRequest request{prefix, "", "", page_size};
  std::set<std::pair<std::string, std::string>> seen_markers{{"", ""}};  // the first page's
  std::vector<UploadInfo> uploads;
  while (true) {
    S3S_ASSIGN_OR_RETURN(UploadPage page, Await(store.ListMultipartUploads(request), what));
    for (UploadInfo& upload : page.uploads) uploads.push_back(std::move(upload));
    if (!page.truncated) return uploads;
    if (!seen_markers.emplace(page.next_key_marker, page.next_upload_id_marker).second) {
      return Corrupt(what + ": the store handed out the markers '" + page.next_key_marker.substr(0, 80) + "', '" +
                     page.next_upload_id_marker.substr(0, 80) + "' a second time, which would make the listing endless");
    }
    request.key_marker = std::move(page.next_key_marker);
    request.upload_id_marker = std::move(page.next_upload_id_marker);
  }
}

}  // namespace s3stream
