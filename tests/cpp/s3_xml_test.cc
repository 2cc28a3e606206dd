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

TEST(S3Xml, UrlDecodeKeepsInvalidEscapes) {
  EXPECT_EQ(UrlDecode("%zz%4", false), "%zz%4");
  EXPECT_EQ(UrlDecode("a+b", false), "a+b");
  EXPECT_EQ(StripQuotes("\"x\""), "x");
  EXPECT_EQ(StripQuotes("x"), "x");
}

}  // namespace
}  // namespace s3stream::internal
