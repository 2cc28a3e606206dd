// The S3 driver: an ObjectStore over one bucket of an S3-compatible service.
#pragma once

#include <memory>
#include <string>

#include "s3stream/object_store.h"
#include "store/s3/s3_request.h"

namespace s3stream::internal {

std::unique_ptr<ObjectStore> MakeS3Store(std::shared_ptr<const S3Context> ctx, std::string bucket);

// The streaming, resuming GET behind S3 ObjectStore::Get (s3_get.cc).
Future<Status> StartS3Get(std::shared_ptr<const S3Context> ctx, std::string bucket, std::string key,
                          GetOptions options, std::shared_ptr<BodySink> sink);

// HEAD behind ObjectStore::Head, also used by GET to explain a 416.
Future<Result<ObjectInfo>> StartS3Head(std::shared_ptr<const S3Context> ctx, std::string bucket, std::string key);

// "bytes 0-99/1000" -> (0, 99, 1000); false if malformed.
bool ParseContentRange(std::string_view value, uint64_t* first, uint64_t* last, uint64_t* total);

// RFC 7231 date ("Sun, 06 Nov 1994 08:49:37 GMT") -> ISO 8601 ("1994-11-06T08:49:37.000Z"); input
// returned unchanged if it does not parse.
std::string HttpDateToIso8601(const std::string& http_date);

}  // namespace s3stream::internal
