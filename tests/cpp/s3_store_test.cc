// The S3 driver against a fake transport: retry decisions, resume after a broken body, error
// mapping, signing on/off. (The driver against a real server: s3_conformance_moto_test.cc.)
#include <gtest/gtest.h>

#include "fake_transport.h"
#include "store/s3/s3_store.h"

namespace s3stream {
namespace {

using testing::ErrorXml;
using testing::FakeResponse;
using testing::FakeTransport;
using internal::FindHeader;
using internal::HttpRequest;

constexpr char kSecret[] = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

struct Harness {
  explicit Harness(FakeTransport::Responder responder, bool with_credentials = true, int max_attempts = 4) {
    transport = std::make_shared<FakeTransport>(std::move(responder));
    ResolvedConfig config;
    config.endpoint = "http://127.0.0.1:9000";
    config.endpoint_is_aws = false;
    config.region = "us-east-1";
    config.path_style = true;
    config.options.max_attempts = max_attempts;
    if (with_credentials) {
      config.credentials = std::make_shared<CredentialsCache>(StaticCredentials({"AKIDEXAMPLE", kSecret, ""}, "test"));
      config.credentials_source = "explicit";
    } else {
      config.credentials_source = "none";
    }
    store = internal::MakeS3Store(std::make_shared<internal::S3Context>(config, transport), "bucket");
  }
  std::shared_ptr<FakeTransport> transport;
  std::unique_ptr<ObjectStore> store;
};

std::string Bytes(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + i % 26);
  return s;
}

TEST(S3Store, RetriesSlowDownThenSucceeds) {
  Harness h([](const HttpRequest&, int i) {
    if (i < 2) return FakeResponse{503, {}, ErrorXml("SlowDown", "Please reduce your request rate.")};
    return FakeResponse{200, {{"ETag", "\"abc\""}}, "payload"};
  });
  Result<Buffer> got = GetBuffer(*h.store, "key").Take();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->view(), "payload");
  EXPECT_EQ(h.transport->requests().size(), 3u);
}

TEST(S3Store, GivesUpAfterMaxAttemptsAndSaysSo) {
  Harness h([](const HttpRequest&, int) { return FakeResponse{500, {}, ErrorXml("InternalError", "boom")}; },
            true, 3);
  Result<Buffer> got = GetBuffer(*h.store, "key").Take();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(got.status().message().find("s3://bucket/key"), std::string::npos);
  EXPECT_NE(got.status().message().find("3 attempts"), std::string::npos);
  EXPECT_EQ(h.transport->requests().size(), 3u);
}

TEST(S3Store, NetworkErrorsAreRetried) {
  Harness h([](const HttpRequest&, int i) {
    if (i == 0) return FakeResponse{.network_error = true};
    return FakeResponse{200, {{"ETag", "\"e\""}}, "ok"};
  });
  Result<Buffer> got = GetBuffer(*h.store, "key").Take();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->view(), "ok");
}

TEST(S3Store, ResumesFromTheByteReachedWithIfMatch) {
  const std::string body = Bytes(1000);
  Harness h([&](const HttpRequest& req, int i) {
    if (i == 0) return FakeResponse{200, {{"ETag", "\"v1\""}}, body, /*reset_after=*/size_t{437}};
    // The resume must ask for exactly the rest, pinned to the first ETag.
    const std::string* range = FindHeader(req.headers, "Range");
    const std::string* if_match = FindHeader(req.headers, "If-Match");
    if (!range || *range != "bytes=437-" || !if_match || *if_match != "\"v1\"") {
      return FakeResponse{400, {}, ErrorXml("BadResume", "unexpected resume request")};
    }
    return FakeResponse{206, {{"ETag", "\"v1\""}, {"Content-Range", "bytes 437-999/1000"}}, body.substr(437)};
  });
  Result<Buffer> got = GetBuffer(*h.store, "key").Take();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->view(), body);  // no byte twice, none missing
  EXPECT_EQ(h.transport->requests().size(), 2u);
}

TEST(S3Store, ResumesARangedGetWithinItsRange) {
  const std::string body = Bytes(1000);
  Harness h([&](const HttpRequest& req, int i) {
    const std::string* range = FindHeader(req.headers, "Range");
    if (i == 0) {
      EXPECT_EQ(*range, "bytes=100-299");
      return FakeResponse{206, {{"ETag", "\"v1\""}, {"Content-Range", "bytes 100-299/1000"}}, body.substr(100, 200),
                          size_t{50}};
    }
    EXPECT_EQ(*range, "bytes=150-299");
    return FakeResponse{206, {{"ETag", "\"v1\""}, {"Content-Range", "bytes 150-299/1000"}}, body.substr(150, 150)};
  });
  GetOptions options;
  options.range = ByteRange{100, 300};
  Result<Buffer> got = GetBuffer(*h.store, "key", options).Take();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->view(), body.substr(100, 200));
}

TEST(S3Store, ObjectReplacedDuringResumeIsReported) {
  const std::string body = Bytes(100);
  Harness h([&](const HttpRequest&, int i) {
    if (i == 0) return FakeResponse{200, {{"ETag", "\"v1\""}}, body, size_t{10}};
    return FakeResponse{412, {}, ErrorXml("PreconditionFailed", "At least one of the pre-conditions you specified did not hold")};
  });
  Result<Buffer> got = GetBuffer(*h.store, "key").Take();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kPreconditionFailed);
  EXPECT_NE(got.status().message().find("changed while it was being read"), std::string::npos);
}

TEST(S3Store, ServerIgnoringRangeStillYieldsTheRange) {
  const std::string body = Bytes(500);
  Harness h([&](const HttpRequest&, int) { return FakeResponse{200, {{"ETag", "\"v\""}}, body}; });
  GetOptions options;
  options.range = ByteRange{123, 456};
  Result<Buffer> got = GetBuffer(*h.store, "key", options).Take();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->view(), body.substr(123, 333));
}

TEST(S3Store, RangeBeyondTheObjectIsOutOfRange) {
  Harness h([&](const HttpRequest&, int) {
    return FakeResponse{206, {{"ETag", "\"v\""}, {"Content-Range", "bytes 5-9/10"}}, "fghij"};
  });
  GetOptions options;
  options.range = ByteRange{5, 20};
  Result<Buffer> got = GetBuffer(*h.store, "key", options).Take();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(got.status().message().find("[5, 20)"), std::string::npos);
  EXPECT_NE(got.status().message().find("10 bytes"), std::string::npos);
}

TEST(S3Store, ErrorMappingNamesTheObjectAndNeverTheSecret) {
  struct Case {
    int status;
    std::string code;
    StatusCode expected;
    std::string mention;
  };
  const std::vector<Case> cases = {
      {404, "NoSuchKey", StatusCode::kNotFound, "s3://bucket/key"},
      {404, "NoSuchBucket", StatusCode::kNotFound, "bucket 'bucket'"},
      {403, "AccessDenied", StatusCode::kPermissionDenied, "s3://bucket/key"},
      {403, "SignatureDoesNotMatch", StatusCode::kPermissionDenied, "secret access key"},
      {403, "InvalidAccessKeyId", StatusCode::kPermissionDenied, "access key id"},
      {400, "InvalidRequest", StatusCode::kInvalidArgument, "s3://bucket/key"},
  };
  for (const Case& c : cases) {
    Harness h([&](const HttpRequest&, int) { return FakeResponse{c.status, {}, ErrorXml(c.code, "msg")}; });
    Status status = GetBuffer(*h.store, "key").Take().status();
    EXPECT_EQ(status.code(), c.expected) << c.code << ": " << status.ToString();
    EXPECT_NE(status.message().find(c.mention), std::string::npos) << status.message();
    EXPECT_EQ(status.message().find(kSecret), std::string::npos);
    EXPECT_EQ(h.transport->requests().size(), 1u) << c.code << " must not be retried";
  }
}

// S3 answers 416 for a range starting at or past the end; the driver asks for the size to tell an
// empty read at the very end (fine) from a range outside the object (an error that names the size).
TEST(S3Store, UnsatisfiableRangeIsExplainedWithTheSize) {
  Harness h([](const HttpRequest& req, int) {
    if (req.method == "HEAD") return FakeResponse{200, {{"ETag", "\"v\""}, {"Content-Length", "10"}}, ""};
    return FakeResponse{416, {}, ErrorXml("InvalidRange", "The requested range is not satisfiable")};
  });
  GetOptions past;
  past.range = ByteRange{20, std::nullopt};
  Status status = GetBuffer(*h.store, "key", past).Take().status();
  EXPECT_EQ(status.code(), StatusCode::kOutOfRange);
  EXPECT_NE(status.message().find("10 bytes"), std::string::npos) << status.message();

  GetOptions at_end;
  at_end.range = ByteRange{10, std::nullopt};
  Result<Buffer> empty = GetBuffer(*h.store, "key", at_end).Take();
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ(empty->size(), 0u);
}

TEST(S3Store, MissingCredentialsSendUnsignedAndExplainARefusal) {
  Harness h([](const HttpRequest& req, int) {
    EXPECT_EQ(FindHeader(req.headers, "Authorization"), nullptr);
    return FakeResponse{403, {}, ErrorXml("AccessDenied", "Access Denied")};
  }, /*with_credentials=*/false);
  Status status = GetBuffer(*h.store, "key").Take().status();
  EXPECT_EQ(status.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(status.message().find("AWS_ACCESS_KEY_ID"), std::string::npos) << status.message();
}

TEST(S3Store, SignedRequestsCarryAuthorization) {
  Harness h([](const HttpRequest& req, int) {
    const std::string* auth = FindHeader(req.headers, "Authorization");
    EXPECT_TRUE(auth && auth->starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"));
    return FakeResponse{200, {{"ETag", "\"e\""}}, ""};
  });
  EXPECT_TRUE(h.store->Put("key", Buffer::CopyOf(std::string_view("x"))).Take().ok());
}

TEST(S3Store, CompleteMultipartErrorInsideA200IsRetried) {
  Harness h([](const HttpRequest&, int i) {
    if (i == 0) return FakeResponse{200, {}, ErrorXml("InternalError", "We encountered an internal error.")};
    return FakeResponse{200, {}, "<?xml version=\"1.0\"?><CompleteMultipartUploadResult><ETag>\"x-2\"</ETag></CompleteMultipartUploadResult>"};
  });
  Status status = h.store->CompleteMultipartUpload("key", "upload", {{1, "a"}, {2, "b"}}).Take();
  EXPECT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(h.transport->requests().size(), 2u);
}

TEST(S3Store, ListFollowsTheWireFormat) {
  Harness h([](const HttpRequest& req, int) {
    EXPECT_NE(req.url.find("list-type=2"), std::string::npos);
    EXPECT_NE(req.url.find("prefix=a%20b%2F"), std::string::npos) << req.url;
    EXPECT_NE(req.url.find("continuation-token=tok%2B1"), std::string::npos) << req.url;
    return FakeResponse{200, {}, R"(<?xml version="1.0"?><ListBucketResult><EncodingType>url</EncodingType>
      <IsTruncated>false</IsTruncated><Contents><Key>a+b/%C3%BC</Key><Size>3</Size><ETag>"e"</ETag></Contents>
      </ListBucketResult>)"};
  });
  ListRequest request;
  request.prefix = "a b/";
  request.continuation_token = "tok+1";
  Result<ListPage> page = h.store->List(request).Take();
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->objects.size(), 1u);
  EXPECT_EQ(page->objects[0].key, "a b/\xC3\xBC");
  EXPECT_EQ(page->objects[0].size, 3u);
}

// A ListMultipartUploads page: `uploads` keys, truncated with the given markers unless both are empty.
std::string UploadsPage(const std::vector<std::string>& keys, const std::string& next_key, const std::string& next_id) {
  std::string xml = "<ListMultipartUploadsResult><EncodingType>url</EncodingType>";
  xml += next_key.empty() ? "<IsTruncated>false</IsTruncated>"
                          : "<IsTruncated>true</IsTruncated><NextKeyMarker>" + next_key +
                                "</NextKeyMarker><NextUploadIdMarker>" + next_id + "</NextUploadIdMarker>";
  for (const std::string& key : keys) {
    xml += "<Upload><Key>" + key + "</Key><UploadId>id-" + key + "</UploadId><Initiated>2026-01-01T00:00:00.000Z</Initiated></Upload>";
  }
  return xml + "</ListMultipartUploadsResult>";
}

TEST(S3Store, ListUploadsFollowsTheMarkersToTheLastPage) {
  Harness h([](const HttpRequest& req, int call) {
    EXPECT_NE(req.url.find("uploads="), std::string::npos) << req.url;
    EXPECT_NE(req.url.find("max-uploads=2"), std::string::npos) << req.url;
    EXPECT_NE(req.url.find("prefix=ck%20pt%2F"), std::string::npos) << req.url;
    if (call == 0) {
      EXPECT_EQ(req.url.find("key-marker"), std::string::npos) << req.url;
      return FakeResponse{200, {}, UploadsPage({"ck%20pt/a", "ck%20pt/b"}, "ck%20pt/b", "id+b")};
    }
    EXPECT_NE(req.url.find("key-marker=ck%20pt%2Fb"), std::string::npos) << req.url;
    EXPECT_NE(req.url.find("upload-id-marker=id%2Bb"), std::string::npos) << req.url;
    return FakeResponse{200, {}, UploadsPage({"ck%20pt/c"}, "", "")};
  });
  Result<std::vector<UploadInfo>> uploads = ListUploads(*h.store, "ck pt/", 2);
  ASSERT_TRUE(uploads.ok()) << uploads.status().ToString();
  ASSERT_EQ(uploads->size(), 3u);
  EXPECT_EQ((*uploads)[0].key, "ck pt/a");
  EXPECT_EQ((*uploads)[2].key, "ck pt/c");
  EXPECT_EQ((*uploads)[2].upload_id, "id-ck%20pt/c");
  EXPECT_EQ(h.transport->requests().size(), 2u);
}

TEST(S3Store, ListUploadsRefusesMarkersHandedOutTwice) {
  // The same pair again, or a cycle back to an earlier one: either would page forever.
  for (const std::vector<std::string>& markers : {std::vector<std::string>{"k1", "k1"},
                                                  std::vector<std::string>{"k1", "k2", "k1"}}) {
    Harness h([markers](const HttpRequest&, int call) {
      const std::string& m = markers[std::min<size_t>(call, markers.size() - 1)];
      return FakeResponse{200, {}, UploadsPage({m}, m, "id")};
    });
    Result<std::vector<UploadInfo>> uploads = ListUploads(*h.store, "", 1);
    EXPECT_EQ(uploads.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(uploads.status().message().find("a second time"), std::string::npos) << uploads.status().ToString();
    EXPECT_EQ(h.transport->requests().size(), markers.size());  // stopped at the first repeat
  }
}

TEST(S3Store, ListUploadsAcceptsTheSameKeyWithAnotherUploadId) {
  // Many uploads of one key page by upload id: the key marker repeats, the pair does not.
  Harness h([](const HttpRequest&, int call) {
    if (call == 0) return FakeResponse{200, {}, UploadsPage({"k"}, "k", "id-1")};
    if (call == 1) return FakeResponse{200, {}, UploadsPage({"k"}, "k", "id-2")};
    return FakeResponse{200, {}, UploadsPage({"k"}, "", "")};
  });
  Result<std::vector<UploadInfo>> uploads = ListUploads(*h.store, "", 1);
  ASSERT_TRUE(uploads.ok()) << uploads.status().ToString();
  EXPECT_EQ(uploads->size(), 3u);
}

}  // namespace
}  // namespace s3stream

namespace s3stream::internal {
namespace {

TEST(S3Url, PathStyleAndVirtualHosted) {
  ResolvedConfig config;
  config.endpoint = "https://s3.eu-west-1.amazonaws.com";
  config.path_style = false;
  EXPECT_EQ(BuildUrl(config, {"my-bucket", "a b/ü+%=&~.bin", ""}),
            "https://my-bucket.s3.eu-west-1.amazonaws.com/a%20b/%C3%BC%2B%25%3D%26~.bin");
  config.endpoint = "http://127.0.0.1:9000";
  config.path_style = true;
  EXPECT_EQ(BuildUrl(config, {"my-bucket", "k", "uploads="}), "http://127.0.0.1:9000/my-bucket/k?uploads=");
  EXPECT_EQ(BuildUrl(config, {"my-bucket", "", "list-type=2"}), "http://127.0.0.1:9000/my-bucket/?list-type=2");
}

}  // namespace
}  // namespace s3stream::internal
