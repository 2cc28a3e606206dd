// The `file` driver: an ObjectStore over a local directory, the embedded default for demos and for
// tests of the layers above the store. It mirrors the S3 driver's observable semantics (status codes,
// range rules, ListObjectsV2 ordering and pagination, atomic PUT, multipart), so code tested against
// it behaves the same against S3.
//
// Mapping: key "a/b.tar" is the file <root>/a/b.tar. Keys are used verbatim (spaces, unicode,
// `+%=&~`), but a key must be a relative path of non-empty segments: "..", "." and empty segments
// (leading, trailing or doubled '/') are rejected with kInvalidArgument, so no key escapes the root.
// Reserved names, also rejected and never listed: ".s3stream-multipart" (the directory staging the
// parts of multipart uploads, beside the target: <dir of key>/.s3stream-multipart/<upload id>/) and
// names starting with ".s3stream-tmp-" (temporary files, renamed into place when complete). An upload
// a killed writer left staged is listed by ListMultipartUploads (file_uploads.h) until aborted.
//
// ETags are NOT content hashes (an MD5 would mean reading the whole file on every HEAD): they are
// "<size>-<mtime ns>-<inode>" in hex. An ETag is stable while a file is unchanged and changes on every
// PUT through this driver (PUT makes the new mtime strictly greater than the replaced file's); a
// change by another program is seen when it changes the size, mtime or inode.
//
// Like S3: a PUT or completed upload is durable when it returns (fsync before the rename); Complete
// rejects part lists out of order, with unknown parts or ETags, or with a part under 5 MiB that is not
// the last (kInvalidArgument), so writers tested here do not fail later against S3.
//
// Threading: operations run on a small internal thread pool (created on first use, joined when the
// store is destroyed, after finishing every queued operation), so futures complete asynchronously as
// with the S3 driver. Concurrent PUTs of one key are safe (last rename wins).
#pragma once

#include <memory>
#include <string>

#include "s3stream/object_store.h"

namespace s3stream {

// `root_dir` need not exist yet (PUT creates it); a relative path is made absolute now.
std::unique_ptr<ObjectStore> MakeFileStore(std::string root_dir);

}  // namespace s3stream
