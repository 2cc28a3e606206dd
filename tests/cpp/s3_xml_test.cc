#include "store/s3/s3_xml.h"

#include <gtest/gtest.h>

namespace s3stream::internal {
namespace {

TEST(S3Xml, ParsesATruncatedPageWithPrefixes) {
  Result<ListPage> page = ParseListObjectsV2(R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix>p/</Prefix>
<IsTruncated>true</IsTruncated><NextContinuationToken>tok</NextContinuationToken>
<Contents><Key>p/a &amp; b.bin</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified><ETag>&quot;abc&quot;</ETag><Size>12</Size></Contents>
<Contents><Key>p/c</Key><ETag>"def-2"</ETag><Size>0</Size></Contents>
<CommonPrefixes><Prefix>p/dir/</Prefix></CommonPrefixes></ListBucketResult>)");
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_EQ(page->objects[0].key, "p/a & b.bin");
  EXPECT_EQ(page->objects[0].etag, "abc");
  EXPECT_EQ(page->objects[0].size, 12u);
  EXPECT_EQ(page->objects[0].last_modified, "2026-01-01T00:00:00.000Z");
  EXPECT_EQ(page->objects[1].etag, "def-2");
  EXPECT_EQ(page->common_prefixes, std::vector<std::string>{"p/dir/"});
  EXPECT_EQ(page->next_continuation_token, "tok");
}

TEST(S3Xml, DecodesUrlEncodedKeys) {
  Result<ListPage> page = ParseListObjectsV2(
      "<ListBucketResult><EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>"
      "<Contents><Key>a+b%2Bc%25%0A</Key><Size>1</Size></Contents></ListBucketResult>");
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->objects[0].key, "a b+c%\n");
  EXPECT_TRUE(page->next_continuation_token.empty());
}

TEST(S3Xml, TruncatedWithoutTokenIsCorrupt) {
  Result<ListPage> page = ParseListObjectsV2("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>");
  EXPECT_EQ(page.status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(ParseListObjectsV2("<html>proxy error</html>").status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(ParseListObjectsV2("not xml <<<").status().code(), StatusCode::kCorrupt);
}

TEST(S3Xml, ParsesErrorsAndToleratesNonXml) {
  S3ErrorDocument e = ParseErrorDocument(
      "<Error><Code>PermanentRedirect</Code><Message>Use the right endpoint</Message><Region>eu-west-1</Region></Error>");
  EXPECT_EQ(e.code, "PermanentRedirect");
  EXPECT_EQ(e.message, "Use the right endpoint");
  EXPECT_EQ(e.region, "eu-west-1");
  EXPECT_TRUE(ParseErrorDocument("").code.empty());
  EXPECT_TRUE(ParseErrorDocument("<html>502 Bad Gateway</html>").code.empty());
  EXPECT_TRUE(IsErrorDocument("<Error><Code>InternalError</Code></Error>"));
  EXPECT_FALSE(IsErrorDocument("<CompleteMultipartUploadResult/>"));
}

TEST(S3Xml, MultipartDocuments) {
  Result<std::string> id = ParseInitiateMultipartUpload(
      "<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><UploadId>up-1</UploadId></InitiateMultipartUploadResult>");
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, "up-1");
  EXPECT_EQ(ParseInitiateMultipartUpload("<InitiateMultipartUploadResult/>").status().code(), StatusCode::kCorrupt);
  std::string xml = BuildCompleteMultipartUpload({{1, "a"}, {2, "b"}});
  EXPECT_NE(xml.find("<Part><PartNumber>1</PartNumber><ETag>\"a\"</ETag></Part>"), std::string::npos) << xml;
  EXPECT_NE(xml.find("<PartNumber>2</PartNumber>"), std::string::npos);
}

TEST(S3Xml, ParsesAListOfUploads) {
  Result<UploadPage> page = ParseListMultipartUploads(R"(<?xml version="1.0" encoding="UTF-8"?>
<ListMultipartUploadsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Bucket>b</Bucket>
<KeyMarker></KeyMarker><UploadIdMarker></UploadIdMarker><MaxUploads>1000</MaxUploads><IsTruncated>false</IsTruncated>
<Upload><Key>ckpt/a &amp; b.pt</Key><UploadId>id-1</UploadId><Initiator><ID>x</ID></Initiator>
<StorageClass>STANDARD</StorageClass><Initiated>2026-01-01T00:00:00.000Z</Initiated></Upload>
<Upload><Key>ckpt/c.pt</Key><UploadId>id-2</UploadId><Initiated>2026-01-02T03:04:05.000Z</Initiated></Upload>
</ListMultipartUploadsResult>)");
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->uploads.size(), 2u);
  EXPECT_EQ(page->uploads[0].key, "ckpt/a & b.pt");
  EXPECT_EQ(page->uploads[0].upload_id, "id-1");
  EXPECT_EQ(page->uploads[0].initiated, "2026-01-01T00:00:00.000Z");
  EXPECT_EQ(page->uploads[1].key, "ckpt/c.pt");
  EXPECT_FALSE(page->truncated);
  EXPECT_TRUE(page->next_key_marker.empty());

  Result<UploadPage> none = ParseListMultipartUploads(
      "<ListMultipartUploadsResult><IsTruncated>false</IsTruncated></ListMultipartUploadsResult>");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->uploads.empty());
}

TEST(S3Xml, ATruncatedListOfUploadsCarriesItsMarkersDecoded) {
  Result<UploadPage> page = ParseListMultipartUploads(
      "<ListMultipartUploadsResult><EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>"
      "<NextKeyMarker>a+b%2Bc</NextKeyMarker><NextUploadIdMarker>id+9</NextUploadIdMarker>"
      "<Upload><Key>a+b%2Bc</Key><UploadId>id+9</UploadId><Initiated>2026-01-01T00:00:00Z</Initiated></Upload>"
      "</ListMultipartUploadsResult>");
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_TRUE(page->truncated);
  EXPECT_EQ(page->uploads[0].key, "a b+c");
  EXPECT_EQ(page->next_key_marker, "a b+c");
  EXPECT_EQ(page->next_upload_id_marker, "id+9");  // ids are never encoded
}

TEST(S3Xml, AHostileListOfUploadsIsCorrupt) {
  const std::string valid_upload = "<Upload><Key>k</Key><UploadId>i</UploadId><Initiated>t</Initiated></Upload>";
  for (const std::string& body : {
           std::string("not xml <<<"),
           std::string("<html>proxy error</html>"),
           std::string("<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>"),  // another listing
           // an upload missing what it takes to abort it or to judge its age
           std::string("<ListMultipartUploadsResult><IsTruncated>false</IsTruncated>"
                       "<Upload><UploadId>i</UploadId><Initiated>t</Initiated></Upload></ListMultipartUploadsResult>"),
           std::string("<ListMultipartUploadsResult><IsTruncated>false</IsTruncated>"
                       "<Upload><Key>k</Key><Initiated>t</Initiated></Upload></ListMultipartUploadsResult>"),
           std::string("<ListMultipartUploadsResult><IsTruncated>false</IsTruncated>"
                       "<Upload><Key>k</Key><UploadId>i</UploadId></Upload></ListMultipartUploadsResult>"),
           // no next page to ask for, or no word on whether there is one
           "<ListMultipartUploadsResult><IsTruncated>true</IsTruncated>" + valid_upload + "</ListMultipartUploadsResult>",
           "<ListMultipartUploadsResult><IsTruncated>true</IsTruncated><NextUploadIdMarker>i</NextUploadIdMarker>" +
               valid_upload + "</ListMultipartUploadsResult>",
           "<ListMultipartUploadsResult>" + valid_upload + "</ListMultipartUploadsResult>",
           "<ListMultipartUploadsResult><IsTruncated>maybe</IsTruncated>" + valid_upload + "</ListMultipartUploadsResult>",
       }) {
    Result<UploadPage> page = ParseListMultipartUploads(body);
    EXPECT_EQ(page.status().code(), StatusCode::kCorrupt) << body;
  }
  Result<UploadPage> page = ParseListMultipartUploads(
      "<ListMultipartUploadsResult><IsTruncated>false</IsTruncated>"
      "<Upload><Key>ckpt/x</Key><UploadId>i</UploadId></Upload></ListMultipartUploadsResult>");
  EXPECT_NE(page.status().message().find("ckpt/x without Initiated"), std::string::npos) << page.status().ToString();
}

TEST(S3Xml, UrlDecodeKeepsInvalidEscapes) {
  EXPECT_EQ(UrlDecode("%zz%4", false), "%zz%4");
  EXPECT_EQ(UrlDecode("a+b", false), "a+b");
  EXPECT_EQ(StripQuotes("\"x\""), "x");
  EXPECT_EQ(StripQuotes("x"), "x");
}

}  // namespace
}  // namespace s3stream::internal
