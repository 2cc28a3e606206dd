// ListObjectsV2 over a directory tree, for the file driver: the same order, prefixes, delimiter
// roll-up and pagination as S3, without sorting the whole tree.
#pragma once

#include <string>

#include "s3stream/object_store.h"

namespace s3stream::internal {

// One page of the keys under `root` (absolute, normalised) that `request` asks for.
Result<ListPage> ListTree(const std::string& root, const ListRequest& request);

}  // namespace s3stream::internal
