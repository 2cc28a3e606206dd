// libFuzzer target for the format layer: arbitrary bytes through TarParser + SampleGrouper, plain or
// through GzipInflater. Input layout: byte 0 = flags (bit 0: gzip), byte 1 = chunk size selector,
// the rest = the object's bytes. Besides the sanitizers, it checks two properties:
// - chunking never changes the result: a chunked parse equals a whole-buffer parse (members,
//   bytes, offsets, samples, and the error message; for gzip input, the result when both succeed);
// - TarWriter round trip: members parsed from valid input, written again, parse back the same.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "format/gzip_stream.h"
#include "s3stream/tar.h"
#include "s3stream/webdataset.h"

namespace {

using namespace s3stream;

struct Outcome {
  std::string status;  // "" when OK
  std::vector<std::string> members;  // name, offsets, bytes
  std::vector<std::string> samples;  // key, offsets, fields
  std::vector<std::pair<std::string, std::string>> files;
};

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "tar_fuzz: property violated: %s\n", what);
    std::abort();
  }
}

Outcome Run(const uint8_t* data, size_t size, size_t chunk, bool gzip, size_t gzip_block) {
  Outcome out;
  TarParser parser("fuzz.tar");
  SampleGrouper grouper("fuzz.tar");
  auto on_sample = [&](Sample&& s) {
    std::string d = s.key + "|" + std::to_string(s.offset) + "|" + std::to_string(s.end_offset);
    Check(s.offset < s.end_offset, "sample offsets ordered");
    for (const auto& [ext, buf] : s.fields) d += "|" + ext + "=" + std::string(buf.view());
    out.samples.push_back(std::move(d));
    return Status::Ok();
  };
  auto on_member = [&](TarMember&& m) {
    Check(m.data.size() == m.size, "data size matches member size");
    Check(m.header_offset < m.data_offset, "header before data");
    Check(m.data_offset % kTarBlockSize == 0, "data block aligned");
    out.members.push_back(m.name + "|" + std::to_string(m.header_offset) + "|" + std::to_string(m.data_offset) +
                          "|" + std::string(m.data.view()));
    out.files.emplace_back(m.name, std::string(m.data.view()));
    return grouper.Add(std::move(m), on_sample);
  };
  internal::GzipInflater inflater("fuzz.tar", gzip_block);
  auto on_tar_bytes = [&](Buffer b) { return parser.Feed(b, on_member); };
  Status status;
  for (size_t pos = 0; pos < size && status.ok(); pos += chunk) {
    size_t n = std::min(chunk, size - pos);
    Buffer piece = Buffer::CopyOf(std::span<const uint8_t>(data + pos, n));  // own storage: ASan sees overreads
    status = gzip ? inflater.Feed(piece.span(), on_tar_bytes) : parser.Feed(piece, on_member);
  }
  if (status.ok() && gzip) status = inflater.Finish();
  if (status.ok()) status = parser.Finish();
  if (status.ok()) status = grouper.Finish(on_sample);
  if (!status.ok()) out.status = status.ToString();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const bool gzip = data[0] & 1;
  const size_t chunk = 1 + size_t{data[1]} * data[1];  // 1 .. 65026 bytes
  data += 2;
  size -= 2;

  Outcome whole = Run(data, size, size == 0 ? 1 : size, gzip, 1 << 20);
  Outcome chunked = Run(data, size, chunk, gzip, 1 + chunk % 1000);
  if (!gzip) {
    Check(whole.status == chunked.status, "same status whatever the chunking");
    Check(whole.members == chunked.members, "same members whatever the chunking");
    Check(whole.samples == chunked.samples, "same samples whatever the chunking");
  } else {
    // zlib notices corruption a few bytes later or earlier depending on how much input it is
    // given, and output before a gzip error may or may not reach the parser: only success must agree.
    Check(whole.status.empty() == chunked.status.empty(), "same success whatever the chunking");
    if (whole.status.empty()) {
      Check(whole.members == chunked.members, "same members whatever the chunking");
      Check(whole.samples == chunked.samples, "same samples whatever the chunking");
    }
  }

  if (whole.status.empty()) {
    std::vector<std::pair<std::string, std::string>> writable;
    for (auto& f : whole.files) {
      if (!f.first.empty() && f.first.find('\0') == std::string::npos && f.first.back() != '/') {
        writable.push_back(std::move(f));
      }
    }
    std::string tar = TarToString(writable);
    Outcome again = Run(reinterpret_cast<const uint8_t*>(tar.data()), tar.size(), tar.size(), false, 1);
    Check(again.status.empty(), "TarWriter output parses");
    Check(again.files == writable, "TarWriter round trip");
  }
  return 0;
}
