#include "s3stream/uri.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

namespace s3stream {
namespace {

ObjectUri MustParse(std::string_view uri) {
  auto r = ObjectUri::Parse(uri);
  EXPECT_TRUE(r.ok()) << uri << ": " << r.status().ToString();
  return r.ok() ? r.value() : ObjectUri{};
}

Status ParseError(std::string_view uri) {
  auto r = ObjectUri::Parse(uri);
  EXPECT_FALSE(r.ok()) << uri << " parsed";
  return r.ok() ? Status::Ok() : r.status();
}

TEST(ObjectUri, S3BucketAndKey) {
  ObjectUri u = MustParse("s3://my-bucket/train/0001.tar");
  EXPECT_EQ(u.scheme, "s3");
  EXPECT_EQ(u.bucket, "my-bucket");
  EXPECT_EQ(u.key, "train/0001.tar");
}

TEST(ObjectUri, S3KeyIsVerbatim) {
  // Spaces, unicode and URL-significant characters are key bytes, not escapes.
  for (std::string key : {"a b/c d.jpg", "données/ሴ.png", "x+y%20z=1&w~v", "a//b/./c/../d", "trailing/", "?q#f"}) {
    ObjectUri u = MustParse("s3://bucket/" + key);
    EXPECT_EQ(u.key, key);
  }
}

TEST(ObjectUri, S3EmptyKey) {
  EXPECT_EQ(MustParse("s3://bucket").key, "");
  EXPECT_EQ(MustParse("s3://bucket/").key, "");
  EXPECT_EQ(MustParse("s3://bucket").bucket, "bucket");
}

TEST(ObjectUri, SchemeIsCaseInsensitive) {
  ObjectUri u = MustParse("S3://bucket/k");
  EXPECT_EQ(u.scheme, "s3");
  EXPECT_EQ(u.key, "k");
}

TEST(ObjectUri, FileUri) {
  ObjectUri u = MustParse("file:///data/shards/a b.tar");
  EXPECT_EQ(u.scheme, "file");
  EXPECT_EQ(u.bucket, "");
  EXPECT_EQ(u.key, "data/shards/a b.tar");
  EXPECT_EQ(MustParse("file://localhost/data/x").key, "data/x");
  EXPECT_EQ(MustParse("file:///").key, "");
}

TEST(ObjectUri, PlainPaths) {
  EXPECT_EQ(MustParse("/data/x.tar").key, "data/x.tar");
  EXPECT_EQ(MustParse("/data/./y/../x.tar").key, "data/x.tar");  // lexically normalised
  EXPECT_EQ(MustParse("/data/dir/").key, "data/dir/");            // a prefix keeps its slash

  const std::string cwd = std::filesystem::current_path().lexically_normal().string().substr(1);
  ObjectUri rel = MustParse("shards/x.tar");
  EXPECT_EQ(rel.scheme, "file");
  EXPECT_EQ(rel.key, cwd + "/shards/x.tar");
  EXPECT_EQ(MustParse("./a/../b").key, cwd + "/b");
  // "://" after something that is not a scheme is just part of a relative path.
  EXPECT_EQ(MustParse("dir/a://b").key, cwd + "/dir/a:/b");
}

TEST(ObjectUri, LeadingDoubleSlashesAreTheRoot) {
  // Found by uri_fuzz: "//x" kept its "//" through lexically_normal, giving the key "/x", which the
  // file store refuses (an empty first segment) and which did not round-trip as a relative key.
  EXPECT_EQ(MustParse("//data/x.tar").key, "data/x.tar");
  EXPECT_EQ(MustParse("///data//x.tar").key, "data/x.tar");
  EXPECT_EQ(MustParse("file:////data/x.tar").key, "data/x.tar");
  EXPECT_EQ(MustParse("//").key, "");
  EXPECT_EQ(MustParse("//").ToString(), "file:///");
}

TEST(ObjectUri, RoundTrips) {
  for (std::string s : {"s3://bucket/a b/ሴ+%.jpg", "s3://bucket/", "file:///data/x.tar", "file:///"}) {
    ObjectUri u = MustParse(s);
    EXPECT_EQ(u.ToString(), s);
    ObjectUri again = MustParse(u.ToString());
    EXPECT_EQ(again.scheme, u.scheme);
    EXPECT_EQ(again.bucket, u.bucket);
    EXPECT_EQ(again.key, u.key);
  }
  EXPECT_EQ(MustParse("s3://bucket").ToString(), "s3://bucket/");
  EXPECT_EQ(MustParse("/tmp/x").ToString(), "file:///tmp/x");
}

TEST(ObjectUri, WithKey) {
  ObjectUri prefix = MustParse("s3://bucket/train/");
  ObjectUri obj = prefix.WithKey("train/0001.tar");
  EXPECT_EQ(obj.ToString(), "s3://bucket/train/0001.tar");
  EXPECT_EQ(prefix.key, "train/");  // the original is unchanged
  EXPECT_EQ(MustParse("file:///d/").WithKey("d/e").ToString(), "file:///d/e");
}

TEST(ObjectUri, Errors) {
  struct Case {
    std::string uri, mentions;
  } cases[] = {
      {"", "empty"},
      {"s3://", "bucket name is missing"},
      {"s3:///key", "bucket name is missing"},
      {"s3://ab/k", "3 to 63"},
      {"s3://My-Bucket/k", "lowercase"},
      {"s3://-bucket/k", "start and end"},
      {"s3://192.168.1.1/k", "IP address"},
      {"file://otherhost/x", "absolute path"},
      {"s3:/b/k", "'s3:' must be followed by '//'"},
      {"s3:b/k", "'s3:' must be followed by '//'"},
      {"gs:b/k", "'gs:' must be followed by '//'"},
  };
  for (const Case& c : cases) {
    Status s = ParseError(c.uri);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.uri;
    EXPECT_NE(s.message().find("'" + c.uri + "'"), std::string::npos) << s.message();  // quotes the input
    EXPECT_NE(s.message().find(c.mentions), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("s3://my-bucket/"), std::string::npos) << s.message();  // shows an example
  }
}

TEST(ObjectUri, OtherSchemesNameAContainerForTheirDriver) {
  // Whether a driver serves them is the Client's business (client_test.cc).
  ObjectUri gs = MustParse("GS://Bucket_Of-Any.Shape/a/b");
  EXPECT_EQ(gs.scheme, "gs");
  EXPECT_EQ(gs.bucket, "Bucket_Of-Any.Shape");
  EXPECT_EQ(gs.key, "a/b");
  EXPECT_EQ(gs.ToString(), "gs://Bucket_Of-Any.Shape/a/b");
  EXPECT_EQ(ParseError("gs:///k").code(), StatusCode::kInvalidArgument);
}

TEST(ValidateBucketName, AcceptsValidNames) {
  for (std::string name : std::vector<std::string>{"abc", "my-bucket", "my.bucket.name", "bucket123", "123bucket", "a-b.c-d",
                           std::string(63, 'a'), "my_bucket" /* legacy / S3-compatible, see uri.cc */}) {
    EXPECT_TRUE(ValidateBucketName(name).ok()) << name << ": " << ValidateBucketName(name).message();
  }
}

TEST(ValidateBucketName, RejectsInvalidNames) {
  for (std::string name : std::vector<std::string>{"", "ab", std::string(64, 'a'), "MyBucket", "my bucket", "bucket-", ".bucket",
                           "_bucket", "bucket_", "my..bucket", "10.0.0.1", "my/bucket"}) {
    Status s = ValidateBucketName(name);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << name;
    EXPECT_NE(s.message().find("'" + name + "'"), std::string::npos) << s.message();
  }
  EXPECT_TRUE(ValidateBucketName("10.0.0.1a").ok());  // not an IP address
}

}  // namespace
}  // namespace s3stream
