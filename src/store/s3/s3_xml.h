// Parsing and building the XML documents of the S3 REST API (pugixml). Pure functions, no I/O.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "s3stream/object_store.h"
#include "s3stream/status.h"

namespace s3stream::internal {

struct S3ErrorDocument {
  std::string code;     // e.g. "NoSuchKey"; empty if the body was not an S3 error document
  std::string message;
  std::string region;   // <Region>, sent with PermanentRedirect / AuthorizationHeaderMalformed
};

// Tolerates empty and non-XML bodies (proxies answer with HTML): fields stay empty.
S3ErrorDocument ParseErrorDocument(std::string_view body);

// ListObjectsV2 response. Keys are URL-decoded when the response says EncodingType=url.
Result<ListPage> ParseListObjectsV2(std::string_view body);

// ListMultipartUploads response. Keys and markers are URL-decoded when it says EncodingType=url.
// Strict: an upload without Key, UploadId or Initiated, an IsTruncated other than true/false, or a
// truncated page without NextKeyMarker is kCorrupt (the next page could not be asked for).
Result<UploadPage> ParseListMultipartUploads(std::string_view body);

// InitiateMultipartUploadResult -> UploadId.
Result<std::string> ParseInitiateMultipartUpload(std::string_view body);

// CompleteMultipartUpload can fail with HTTP 200 and an <Error> body; this says which it was.
bool IsErrorDocument(std::string_view body);

std::string BuildCompleteMultipartUpload(const std::vector<CompletedPart>& parts);

// Removes the quotes S3 puts around ETags.
std::string StripQuotes(std::string_view etag);

// Decodes %XX (and '+' as space when `plus_is_space`); invalid escapes are kept verbatim.
std::string UrlDecode(std::string_view s, bool plus_is_space);

}  // namespace s3stream::internal
