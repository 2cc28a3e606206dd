// ListMultipartUploads for the file driver: the uploads staged in .s3stream-multipart directories
// (file_store.h) that no Complete or Abort removed, as a writer that was killed leaves them.
#pragma once

#include <string>

#include "s3stream/object_store.h"

namespace s3stream::internal {

// One page of the staged uploads under `root` (absolute, normalised) whose key starts with the
// request's prefix, ordered by key, then upload id; `initiated` is when the upload was created
// (its key file's mtime). Symlinked directories are not followed.
Result<UploadPage> ListStagedUploads(const std::string& root, const UploadListRequest& request);

}  // namespace s3stream::internal
