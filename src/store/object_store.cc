// The driver-independent helpers declared in s3stream/object_store.h: one GET into one Buffer, and a
// loop over List pages.
#include "s3stream/object_store.h"

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

Status ListEach(ObjectStore& store, ListRequest request,
                const std::function<Status(const ListPage&)>& on_page) {
  while (true) {
    Result<ListPage> page = store.List(request).Take();
    if (!page.ok()) return page.status();
    S3S_RETURN_IF_ERROR(on_page(*page));
    if (page->next_continuation_token.empty()) return Status::Ok();
    // A token that does not advance would loop forever; treat it as the driver bug it is.
    if (page->next_continuation_token == request.continuation_token) {
      return Internal("listing " + store.Describe(request.prefix) +
                      ": the store returned the same continuation token twice");
    }
    request.continuation_token = std::move(page->next_continuation_token);
  }
}

}  // namespace s3stream
