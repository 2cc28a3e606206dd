// libFuzzer target for the S3 response parsers (store/s3/s3_xml, s3_errors): the whole input is a
// response body, given to every parser, since a server may send any document to any request.
// Besides the sanitizers, it checks:
// - a listing that parses has one object per <Contents>, each Size a plain decimal of at most 2^62
//   that prints back as the digits sent, and a continuation token whenever it says it is truncated;
//   one that does not parse is CorruptData;
// - a parsed listing written out again (keys percent-encoded) parses back to the same page;
// - an error document's fields come only from an <Error> root, and ClassifyHttpError never answers
//   OK, keeps the HTTP status and error code, and retries a 503;
// - an UploadId is returned only non-empty, and CompleteMultipartUpload documents built from the
//   input's pieces carry every part back;
// - UrlDecode undoes a full percent-encoding, and never grows its input.
#include <pugixml.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "store/s3/s3_errors.h"
#include "store/s3/s3_xml.h"
#include "util/numbers.h"

namespace {

using namespace s3stream;
using namespace s3stream::internal;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "s3_xml_fuzz: property violated: %s\n", what);
    std::abort();
  }
}

std::string PercentEncodeAll(std::string_view s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    out += '%';
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

// pugixml turns a raw "\r" into "\n" when it reads text back (end-of-line handling), drops text
// that is only whitespace (it may have come from a CDATA section), and a NUL ends a C string: such
// text cannot come back byte for byte, whoever wrote it.
bool XmlSafe(std::string_view s) {
  return s.find('\r') == s.npos && s.find('\0') == s.npos && s.find_first_not_of(" \t\n") != s.npos;
}

bool WrappedInQuotEntity(std::string_view s) {
  return s.size() >= 12 && s.starts_with("&quot;") && s.ends_with("&quot;");
}

std::string Serialize(const pugi::xml_document& doc) {
  struct Writer : pugi::xml_writer {
    std::string out;
    void write(const void* data, size_t size) override { out.append(static_cast<const char*>(data), size); }
  } writer;
  doc.save(writer, "", pugi::format_raw);
  return writer.out;
}

void CheckListing(std::string_view body) {
  Result<ListPage> page = ParseListObjectsV2(body);
  if (!page.ok()) {
    Check(page.status().code() == StatusCode::kCorrupt, "a listing that does not parse is CorruptData");
    return;
  }
  // An independent reading of the same document, for the fields taken verbatim.
  pugi::xml_document doc;
  // As the parser reads it: UTF-8 whatever a byte order mark says.
  Check(doc.load_buffer(body.data(), body.size(), pugi::parse_default, pugi::encoding_utf8), "a listing that parses is XML");
  pugi::xml_node root = doc.child("ListBucketResult");
  size_t i = 0;
  for (pugi::xml_node c : root.children("Contents")) {
    Check(i < page->objects.size(), "no <Contents> dropped");
    const ObjectInfo& info = page->objects[i++];
    std::string digits = c.child("Size").text().as_string();
    Check(info.size <= kMaxObjectBytes, "listed sizes are at most 2^62");
    Check(!digits.empty() && digits.size() <= 19 && digits.find_first_not_of("0123456789") == digits.npos,
          "a listed Size is plain decimal digits");
    size_t nonzero = digits.find_first_not_of('0');
    Check(std::to_string(info.size) == (nonzero == digits.npos ? "0" : digits.substr(nonzero)),
          "a listed Size prints back as the digits sent");
  }
  Check(i == page->objects.size(), "one object per <Contents>");
  const bool truncated = std::string_view(root.child("IsTruncated").text().as_string()) == "true";
  Check(truncated == !page->next_continuation_token.empty(), "a truncated page, and only that, has a token");

  // Written out again, keys and prefixes percent-encoded, the page parses back the same.
  pugi::xml_document again;
  pugi::xml_node r = again.append_child("ListBucketResult");
  r.append_child("EncodingType").text().set("url");
  const bool keep_token = truncated && XmlSafe(page->next_continuation_token);
  r.append_child("IsTruncated").text().set(keep_token ? "true" : "false");
  if (keep_token) r.append_child("NextContinuationToken").text().set(page->next_continuation_token.c_str());
  for (const ObjectInfo& info : page->objects) {
    pugi::xml_node c = r.append_child("Contents");
    c.append_child("Key").text().set(PercentEncodeAll(info.key).c_str());
    c.append_child("Size").text().set(std::to_string(info.size).c_str());
    c.append_child("ETag").text().set(("\"" + info.etag + "\"").c_str());
    c.append_child("LastModified").text().set(info.last_modified.c_str());
  }
  for (const std::string& p : page->common_prefixes) {
    r.append_child("CommonPrefixes").append_child("Prefix").text().set(PercentEncodeAll(p).c_str());
  }
  Result<ListPage> reread = ParseListObjectsV2(Serialize(again));
  Check(reread.ok(), "a listing written from a parsed page parses");
  Check(reread->objects.size() == page->objects.size(), "round trip keeps every object");
  Check(reread->common_prefixes == page->common_prefixes, "round trip keeps prefixes");
  if (keep_token) Check(reread->next_continuation_token == page->next_continuation_token, "round trip keeps the token");
  for (size_t k = 0; k < page->objects.size(); ++k) {
    const ObjectInfo &a = page->objects[k], &b = reread->objects[k];
    Check(a.key == b.key, "round trip keeps keys byte for byte");
    Check(a.size == b.size, "round trip keeps sizes");
    // StripQuotes also strips a &quot;-wrapped ETag, so stripping twice may take off more.
    const bool etag_verbatim = a.etag.find_first_of(std::string_view("\r\0", 2)) == a.etag.npos;
    if (etag_verbatim && !WrappedInQuotEntity(a.etag)) Check(a.etag == b.etag, "round trip keeps ETags");
    if (XmlSafe(a.last_modified) || a.last_modified.empty()) {
      Check(a.last_modified == b.last_modified, "round trip keeps LastModified");
    }
  }
}

void CheckErrorDocument(std::string_view body) {
  S3ErrorDocument e = ParseErrorDocument(body);
  const bool is_error = IsErrorDocument(body);
  if (!e.code.empty() || !e.message.empty() || !e.region.empty()) {
    Check(is_error, "error fields come only from an <Error> document");
  }
  ErrorContext ctx{"GET", "s3://bucket/key", "bucket", "http://127.0.0.1:9000", "us-east-1", "environment"};
  for (int http_status : {301, 403, 404, 412, 416, 500, 503}) {
    AttemptFailure f = ClassifyHttpError(http_status, body, ctx);
    Check(!f.status.ok(), "an HTTP error is never OK");
    Check(f.status.http_status() == http_status, "the HTTP status is kept");
    Check(f.status.error_code() == e.code, "the S3 error code is kept");
    if (http_status == 503) Check(f.retryable, "a 503 is retried");
    if (http_status == 404 && !f.retryable) Check(f.status.code() == StatusCode::kNotFound, "a 404 is NotFound");
  }
}

void CheckMultipart(std::string_view body) {
  Result<std::string> id = ParseInitiateMultipartUpload(body);
  Check(!id.ok() ? id.status().code() == StatusCode::kCorrupt : !id->empty(), "an UploadId is non-empty, or CorruptData");

  // The input cut at '|' into ETags (what UploadPart answered): the document carries each back.
  std::vector<CompletedPart> parts;
  size_t from = 0;
  for (int n = 1; from <= body.size() && n <= 64; ++n) {
    size_t bar = body.find('|', from);
    std::string_view piece = body.substr(from, bar == body.npos ? body.npos : bar - from);
    if (XmlSafe(piece)) parts.push_back({n, std::string(piece)});
    if (bar == body.npos) break;
    from = bar + 1;
  }
  std::string xml = BuildCompleteMultipartUpload(parts);
  pugi::xml_document doc;
  Check(doc.load_string(xml.c_str()), "CompleteMultipartUpload is XML");
  size_t k = 0;
  for (pugi::xml_node p : doc.child("CompleteMultipartUpload").children("Part")) {
    Check(k < parts.size(), "no extra parts");
    Check(p.child("PartNumber").text().as_int() == parts[k].part_number, "part numbers kept");
    Check(p.child("ETag").text().as_string() == "\"" + parts[k].etag + "\"", "ETags kept, quoted");
    ++k;
  }
  Check(k == parts.size(), "every part sent");
}

void CheckUrlDecode(std::string_view body) {
  Check(UrlDecode(PercentEncodeAll(body), true) == body, "UrlDecode undoes percent-encoding");
  Check(UrlDecode(body, true).size() <= body.size(), "UrlDecode never grows its input");
  Check(UrlDecode(body, false).size() <= body.size(), "UrlDecode never grows its input");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);
  CheckListing(body);
  CheckErrorDocument(body);
  CheckMultipart(body);
  CheckUrlDecode(body);
  return 0;
}
