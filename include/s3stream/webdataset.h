// WebDataset sample grouping: consecutive tar members that share a key (the name up to the first dot
// of its basename, directories kept) form one sample whose fields are named by the rest of the name.
// The rules mirror webdataset.tariterators (tar_file_iterator + group_by_keys, webdataset 1.0.2), so a
// shard yields exactly the samples the webdataset package yields; tests/cpp/golden/ checks that.
//
// Where webdataset silently does something surprising, we do the same unless it loses data:
// - names are split by the regex ^((?:.*/|)[^.]+)[.]([^/]*)$ : "a/b.c.d" -> ("a/b", "c.d"), "a." ->
//   ("a", ""), and a basename starting with a dot borrows the directory: "d/.x.y" -> ("d/", "x.y");
//   names without such a split ("README", ".jpg") are skipped;
// - extensions are lowercased ("IMG.JPG" -> "jpg"); we lowercase ASCII only, Python all of Unicode;
// - names whose first path component starts and ends with "__" ("__meta__", "__x__/y.jpg") are
//   skipped as metadata; "__" and "___" too, "a/__x__.jpg" is not;
// - a sample with a non-empty "__bad__" field is dropped;
// - a key that repeats an extension ("a.jpg" twice in a row, or "a.JPG" after "a.jpg"), and the
//   extensions "__key__" and "__url__" (names webdataset uses itself), make webdataset raise
//   ValueError: here they are kCorrupt, naming the shard, key, extension and offset;
// - the same key in two non-adjacent runs gives two samples with that key.
//
// Threading: a SampleGrouper is not thread-safe; use one per shard stream.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "s3stream/buffer.h"
#include "s3stream/status.h"
#include "s3stream/tar.h"

namespace s3stream {

struct Sample {
  std::string key;
  // (extension, data) in archive order; extensions are lowercase and unique within a sample.
  std::vector<std::pair<std::string, Buffer>> fields;
  uint64_t offset = 0;      // header offset of the sample's first member
  uint64_t end_offset = 0;  // just past its last member's padded data: a header boundary

  // The field with this extension, or nullptr.
  const Buffer* Find(std::string_view extension) const;
};

// webdataset's base_plus_ext: splits "dir/key.ext.more" into key "dir/key" and extension "ext.more"
// (not lowercased). Returns false for names webdataset skips for having no extension.
bool SplitKeyExtension(std::string_view name, std::string* key, std::string* extension);

// webdataset's tar_file_iterator metadata filter: true for names it skips.
bool IsWebDatasetMetaName(std::string_view name);

class SampleGrouper {
 public:
  using SampleCallback = std::function<Status(Sample&&)>;

  // `source_name` names the shard in error messages.
  explicit SampleGrouper(std::string source_name);

  // Adds the next member in archive order; calls on_sample when it closes a sample.
  Status Add(TarMember&& member, const SampleCallback& on_sample);
  // End of the shard: emits the last sample. Samples never span shards.
  Status Finish(const SampleCallback& on_sample);

 private:
  Status Emit(const SampleCallback& on_sample);

  std::string source_;
  Sample current_;
  bool open_ = false;
};

}  // namespace s3stream
