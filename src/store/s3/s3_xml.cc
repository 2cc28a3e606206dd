#include "store/s3/s3_xml.h"

#include <pugixml.hpp>

#include <cstdlib>
#include <sstream>

#include "util/numbers.h"

namespace s3stream::internal {
namespace {

bool Load(pugi::xml_document& doc, std::string_view body) {
  return doc.load_buffer(body.data(), body.size(), pugi::parse_default, pugi::encoding_utf8);
}

std::string Text(const pugi::xml_node& parent, const char* name) {
  return parent.child(name).text().as_string();
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string UrlDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      int hi = HexValue(s[i + 1]), lo = HexValue(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(plus_is_space && s[i] == '+' ? ' ' : s[i]);
  }
  return out;
}

std::string StripQuotes(std::string_view etag) {
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  // Some stores send the HTML entity form inside XML that was already decoded once.
  if (etag.starts_with("&quot;") && etag.ends_with("&quot;") && etag.size() >= 12) etag = etag.substr(6, etag.size() - 12);
  return std::string(etag);
}

S3ErrorDocument ParseErrorDocument(std::string_view body) {
  S3ErrorDocument out;
  pugi::xml_document doc;
  if (body.empty() || !Load(doc, body)) return out;
  pugi::xml_node error = doc.child("Error");
  if (!error) return out;
  out.code = Text(error, "Code");
  out.message = Text(error, "Message");
  out.region = Text(error, "Region");
  return out;
}

bool IsErrorDocument(std::string_view body) {
  pugi::xml_document doc;
  return Load(doc, body) && doc.child("Error");
}

Result<ListPage> ParseListObjectsV2(std::string_view body) {
  pugi::xml_document doc;
  if (!Load(doc, body)) return Corrupt("ListObjectsV2 response is not XML");
  pugi::xml_node root = doc.child("ListBucketResult");
  if (!root) return Corrupt("ListObjectsV2 response has no ListBucketResult element");
  const bool url_encoded = Text(root, "EncodingType") == "url";
  auto decode = [&](std::string s) { return url_encoded ? UrlDecode(s, /*plus_is_space=*/true) : s; };

  ListPage page;
  for (pugi::xml_node c : root.children("Contents")) {
    ObjectInfo info;
    info.key = decode(Text(c, "Key"));
    std::optional<uint64_t> size = ParseSize(Text(c, "Size"));
    if (!size) return Corrupt("ListObjectsV2 response lists " + info.key + " with an invalid Size '" + Text(c, "Size").substr(0, 40) + "'");
    info.size = *size;
    info.etag = StripQuotes(Text(c, "ETag"));
    info.last_modified = Text(c, "LastModified");
    page.objects.push_back(std::move(info));
  }
  for (pugi::xml_node p : root.children("CommonPrefixes")) page.common_prefixes.push_back(decode(Text(p, "Prefix")));
  if (std::string_view(root.child("IsTruncated").text().as_string()) == "true") {
    page.next_continuation_token = Text(root, "NextContinuationToken");
    if (page.next_continuation_token.empty()) return Corrupt("ListObjectsV2 response is truncated but has no NextContinuationToken");
  }
  return page;
}

Result<UploadPage> ParseListMultipartUploads(std::string_view body) {
  pugi::xml_document doc;
  if (!Load(doc, body)) return Corrupt("ListMultipartUploads response is not XML");
  pugi::xml_node root = doc.child("ListMultipartUploadsResult");
  if (!root) return Corrupt("ListMultipartUploads response has no ListMultipartUploadsResult element");
  const bool url_encoded = Text(root, "EncodingType") == "url";
  auto decode = [&](std::string s) { return url_encoded ? UrlDecode(s, /*plus_is_space=*/true) : s; };

  UploadPage page;
  for (pugi::xml_node u : root.children("Upload")) {
    UploadInfo upload{decode(Text(u, "Key")), Text(u, "UploadId"), Text(u, "Initiated")};
    // Each is needed: the key and id to abort it, the time to judge its age.
    const char* missing = upload.key.empty()         ? "Key"
                          : upload.upload_id.empty() ? "UploadId"
                          : upload.initiated.empty() ? "Initiated"
                                                     : nullptr;
    if (missing) {
      return Corrupt("ListMultipartUploads response lists an upload" +
                     (upload.key.empty() ? std::string() : " of " + upload.key.substr(0, 200)) + " without " + missing);
    }
    page.uploads.push_back(std::move(upload));
  }
  const std::string truncated = Text(root, "IsTruncated");
  if (truncated != "true" && truncated != "false") {
    return Corrupt("ListMultipartUploads response has IsTruncated '" + truncated.substr(0, 40) + "', not true or false");
  }
  page.truncated = truncated == "true";
  if (page.truncated) {
    page.next_key_marker = decode(Text(root, "NextKeyMarker"));
    page.next_upload_id_marker = Text(root, "NextUploadIdMarker");
    if (page.next_key_marker.empty()) return Corrupt("ListMultipartUploads response is truncated but has no NextKeyMarker");
  }
  return page;
}

Result<std::string> ParseInitiateMultipartUpload(std::string_view body) {
  pugi::xml_document doc;
  if (!Load(doc, body)) return Corrupt("CreateMultipartUpload response is not XML");
  std::string id = Text(doc.child("InitiateMultipartUploadResult"), "UploadId");
  if (id.empty()) return Corrupt("CreateMultipartUpload response has no UploadId");
  return id;
}

std::string BuildCompleteMultipartUpload(const std::vector<CompletedPart>& parts) {
  pugi::xml_document doc;
  pugi::xml_node root = doc.append_child("CompleteMultipartUpload");
  root.append_attribute("xmlns") = "http://s3.amazonaws.com/doc/2006-03-01/";
  for (const CompletedPart& part : parts) {
    pugi::xml_node p = root.append_child("Part");
    p.append_child("PartNumber").text().set(part.part_number);
    p.append_child("ETag").text().set(("\"" + part.etag + "\"").c_str());
  }
  std::ostringstream out;
  doc.save(out, "", pugi::format_raw | pugi::format_no_declaration);
  return out.str();
}

}  // namespace s3stream::internal
