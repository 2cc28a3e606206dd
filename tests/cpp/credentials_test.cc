// CredentialsCache (refresh ahead of expiry, failures, concurrency, fork), the JSON documents of
// credential sources, and credential_process. The HTTP sources are tested end to end in
// tests/python/test_credentials.py against fake metadata servers.
#include "s3stream/credentials.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <thread>
#include <vector>

#include "auth/credentials_json.h"
#include "auth/providers.h"
#include "test_dir.h"

namespace s3stream {
namespace {

using namespace std::chrono_literals;
using internal::CredentialsDocument;
using internal::ParseCredentialsJson;
using internal::ParseRfc3339;

const WallClock::time_point kStart = WallClock::from_time_t(1'800'000'000);

// Hands out credentials numbered by fetch ("AKID1", "AKID2", ...) that expire `lifetime` after the
// fake clock's now; fails while `failing` is set.
class FakeSource final : public CredentialsProvider {
 public:
  explicit FakeSource(const std::atomic<int64_t>* clock_s, std::chrono::seconds lifetime = 3600s)
      : clock_s_(clock_s), lifetime_(lifetime) {}
  Result<std::optional<Credentials>> Fetch() override {
    if (delay.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay.load()));
    const int n = ++fetches;  // counted once answered: a test waiting for it finds the answer stored soon after
    if (failing.load()) return Unavailable("the fake source is down");
    if (none.load()) return std::optional<Credentials>();
    Credentials c{"AKID" + std::to_string(n), "secret", "token", std::nullopt};
    c.expiration = kStart + std::chrono::seconds(clock_s_->load()) + lifetime_;
    return std::optional<Credentials>(c);
  }
  std::string Describe() const override { return "the fake source"; }

  std::atomic<int> fetches{0};
  std::atomic<bool> failing{false};
  std::atomic<bool> none{false};
  std::atomic<int> delay{0};  // ms per fetch

 private:
  const std::atomic<int64_t>* clock_s_;
  const std::chrono::seconds lifetime_;
};

class CacheTest : public ::testing::Test {
 protected:
  CredentialsCache::Options Options() {
    CredentialsCache::Options o;
    o.refresh_ahead = 300s;
    o.retry_after = 10s;
    o.now = [this] { return kStart + std::chrono::seconds(clock_s_.load()); };
    return o;
  }
  std::string KeyNow(CredentialsCache& cache) {
    auto got = cache.Get();
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    return got.ok() && got.value() ? got.value()->access_key_id : "";
  }
  // Waits (up to 5 s) for a refresh running on its own thread.
  static void WaitForFetches(const FakeSource& source, int n) {
    for (int i = 0; i < 500 && source.fetches.load() < n; ++i) std::this_thread::sleep_for(10ms);
    std::this_thread::sleep_for(20ms);  // and for it to store its answer
  }

  std::atomic<int64_t> clock_s_{0};
};

TEST_F(CacheTest, FetchesOnceAndRefreshesAheadOfExpiryWhileTheOldOnesStillSign) {
  auto source = std::make_shared<FakeSource>(&clock_s_);
  CredentialsCache cache(source, Options());
  EXPECT_EQ(KeyNow(cache), "AKID1");
  clock_s_ = 3000;  // 600 s before the expiration: not yet due
  EXPECT_EQ(KeyNow(cache), "AKID1");
  EXPECT_EQ(source->fetches.load(), 1);
  clock_s_ = 3400;  // inside the 300 s window: this Get still signs with AKID1 and starts a refresh
  source->delay = 200;
  EXPECT_EQ(KeyNow(cache), "AKID1");
  EXPECT_EQ(KeyNow(cache), "AKID1");  // the refresh is under way: no second one
  WaitForFetches(*source, 2);
  EXPECT_EQ(source->fetches.load(), 2);
  EXPECT_EQ(KeyNow(cache), "AKID2");
}

TEST_F(CacheTest, AFailedRefreshKeepsTheValidOnesRetriesThenNamesTheSourceOnceExpired) {
  auto source = std::make_shared<FakeSource>(&clock_s_);
  CredentialsCache cache(source, Options());
  EXPECT_EQ(KeyNow(cache), "AKID1");
  source->failing = true;
  clock_s_ = 3400;
  EXPECT_EQ(KeyNow(cache), "AKID1");
  WaitForFetches(*source, 2);
  EXPECT_EQ(KeyNow(cache), "AKID1");  // within retry_after: no new fetch
  EXPECT_EQ(source->fetches.load(), 2);
  clock_s_ = 3411;  // retry_after later: tried again
  EXPECT_EQ(KeyNow(cache), "AKID1");
  WaitForFetches(*source, 3);
  clock_s_ = 3601;  // expired, and the source still fails
  auto got = cache.Get();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(got.status().message().find("the credentials from the fake source expired at 2027-01-15T09:00:00Z"),
            std::string::npos)
      << got.status().message();
  EXPECT_NE(got.status().message().find("the fake source is down"), std::string::npos);
  source->failing = false;
  clock_s_ = 3700;
  const std::string key = KeyNow(cache);  // recovered: the latest fetch's
  EXPECT_EQ(key, "AKID" + std::to_string(source->fetches.load()));
}

TEST_F(CacheTest, TheFirstFetchHappensOnceForManyThreads) {
  auto source = std::make_shared<FakeSource>(&clock_s_);
  source->delay = 100;
  CredentialsCache cache(source, Options());
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] { ok += KeyNow(cache) == "AKID1"; });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 8);
  EXPECT_EQ(source->fetches.load(), 1);
}

TEST_F(CacheTest, AFirstFetchThatFailsIsAnErrorAndIsNotRepeatedAtOnce) {
  auto source = std::make_shared<FakeSource>(&clock_s_);
  source->failing = true;
  CredentialsCache cache(source, Options());
  EXPECT_EQ(cache.Get().status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(cache.Get().status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(source->fetches.load(), 1);
  clock_s_ = 11;
  source->failing = false;
  EXPECT_EQ(KeyNow(cache), "AKID2");
}

TEST_F(CacheTest, ASourceWithNoneLeavesRequestsUnsigned) {
  auto source = std::make_shared<FakeSource>(&clock_s_);
  source->none = true;
  CredentialsCache cache(source, Options());
  auto got = cache.Get();
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got.value().has_value());
  EXPECT_FALSE(cache.had_credentials());
  EXPECT_FALSE(cache.Get().value().has_value());
  EXPECT_EQ(source->fetches.load(), 1);
}

TEST_F(CacheTest, CredentialsAlreadyDueAreNotFetchedOnEveryRequest) {
  auto source = std::make_shared<FakeSource>(&clock_s_, 60s);  // shorter than refresh_ahead
  CredentialsCache cache(source, Options());
  for (int i = 0; i < 20; ++i) EXPECT_EQ(KeyNow(cache), "AKID1");
  EXPECT_EQ(source->fetches.load(), 1);
  clock_s_ = 11;  // retry_after later
  KeyNow(cache);
  WaitForFetches(*source, 2);
  EXPECT_EQ(KeyNow(cache), "AKID2");
}

TEST_F(CacheTest, AForkedChildFetchesItsOwn) {
  auto source = std::make_shared<FakeSource>(&clock_s_);
  CredentialsCache cache(source, Options());
  EXPECT_EQ(KeyNow(cache), "AKID1");
  const pid_t pid = ::fork();
  if (pid == 0) {
    auto got = cache.Get();  // the child's first Get: a fresh fetch, never the parent's lock
    ::_exit(got.ok() && got.value() && got.value()->access_key_id == "AKID2" ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(KeyNow(cache), "AKID1");  // the parent's own, untouched
}

TEST(CredentialsJson, TimesInRfc3339) {
  EXPECT_EQ(WallClock::to_time_t(ParseRfc3339("1970-01-01T00:00:00Z").value()), 0);
  EXPECT_EQ(WallClock::to_time_t(ParseRfc3339("2026-12-02T05:00:00Z").value()), 1796187600);
  const auto base = WallClock::to_time_t(ParseRfc3339("2026-12-02T05:00:00Z").value());
  EXPECT_EQ(WallClock::to_time_t(ParseRfc3339("2026-12-02T05:00:00.123456Z").value()), base);
  EXPECT_EQ(WallClock::to_time_t(ParseRfc3339("2026-12-02T07:00:00+02:00").value()), base);
  EXPECT_EQ(WallClock::to_time_t(ParseRfc3339("2026-12-02T04:30:00-00:30").value()), base);
  for (const char* bad : {"", "2026-12-02", "2026-12-02T05:00:00", "2026-13-02T05:00:00Z", "2026-12-02T05:00:00Zx",
                          "yesterday", "2026-12-02T05:00:00+2:00"}) {
    EXPECT_FALSE(ParseRfc3339(bad).ok()) << bad;
  }
}

TEST(CredentialsJson, ProcessAndEndpointDocuments) {
  auto p = ParseCredentialsJson(
      R"({"Version": 1, "AccessKeyId": "AK", "SecretAccessKey": "SK", "SessionToken": "T",
          "Expiration": "2026-12-02T05:00:00Z"})",
      CredentialsDocument::kProcess, "src");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->access_key_id, "AK");
  EXPECT_EQ(p->session_token, "T");
  EXPECT_TRUE(p->expiration.has_value());
  auto e = ParseCredentialsJson(R"({"Code": "Success", "AccessKeyId": "AK", "SecretAccessKey": "SK", "Token": "T2",
                                     "Expiration": "2026-12-02T05:00:00Z", "Type": "AWS-HMAC"})",
                                CredentialsDocument::kEndpoint, "src");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->session_token, "T2");
  auto static_keys = ParseCredentialsJson(R"({"Version": 1, "AccessKeyId": "AK", "SecretAccessKey": "SK"})",
                                          CredentialsDocument::kProcess, "src");
  ASSERT_TRUE(static_keys.ok());
  EXPECT_FALSE(static_keys->expiration.has_value());
}

TEST(CredentialsJson, BadDocumentsNameTheSourceAndNeverTheSecret) {
  struct Case {
    const char* body;
    CredentialsDocument kind;
    const char* words;
  };
  const Case cases[] = {
      {"not json", CredentialsDocument::kProcess, "are not a JSON object"},
      {"[1, 2]", CredentialsDocument::kProcess, "are not a JSON object"},
      {R"({"AccessKeyId": "AK", "SecretAccessKey": "SUPERSECRET"})", CredentialsDocument::kProcess, "\"Version\": 1"},
      {R"({"Version": 2, "AccessKeyId": "AK", "SecretAccessKey": "SUPERSECRET"})", CredentialsDocument::kProcess,
       "\"Version\": 1"},
      {R"({"Version": 1, "SecretAccessKey": "SUPERSECRET"})", CredentialsDocument::kProcess, "lack AccessKeyId"},
      {R"({"Version": 1, "AccessKeyId": "AK", "SecretAccessKey": ""})", CredentialsDocument::kProcess,
       "lack SecretAccessKey"},
      {R"({"Version": 1, "AccessKeyId": "AK", "SecretAccessKey": "SUPERSECRET", "Expiration": "soon"})",
       CredentialsDocument::kProcess, "Expiration 'soon' is not an RFC 3339 time"},
      {R"({"Version": 1, "AccessKeyId": "AK", "SecretAccessKey": "SUPERSECRET", "Expiration": 5})",
       CredentialsDocument::kProcess, "Expiration that is not a string"},
      {R"({"Code": "AssumeRoleUnauthorizedAccess", "AccessKeyId": "AK", "SecretAccessKey": "SUPERSECRET"})",
       CredentialsDocument::kEndpoint, "were refused: Code AssumeRoleUnauthorizedAccess"},
  };
  for (const Case& c : cases) {
    auto r = ParseCredentialsJson(c.body, c.kind, "the test source");
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_NE(r.status().message().find("the credentials from the test source"), std::string::npos) << c.body;
    EXPECT_NE(r.status().message().find(c.words), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().find("SUPERSECRET"), std::string::npos) << r.status().message();
  }
}

class ProcessTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::FreshTestDir("s3stream-process"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Script(const std::string& body) {
    const std::string path = (dir_ / "creds.sh").string();
    std::ofstream(path) << "#!/bin/sh\n" << body;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(ProcessTest, ItsJsonIsTheCredentials) {
  const std::string script = Script(
      "echo '{\"Version\": 1, \"AccessKeyId\": \"AKPROC\", \"SecretAccessKey\": \"S\", \"SessionToken\": \"T\", "
      "\"Expiration\": \"2030-01-01T00:00:00Z\"}'\n");
  auto source = internal::ProcessCredentialsProvider(script + " --profile 'with space'", "dev");
  auto got = source->Fetch();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got.value()->access_key_id, "AKPROC");
  EXPECT_EQ(source->Describe(), "credential_process of profile 'dev'");
}

TEST_F(ProcessTest, AFailureShowsItsStderrNotItsStdout) {
  const std::string script = Script("echo '{\"SecretAccessKey\": \"SUPERSECRET\"}'\necho 'token expired: run aws sso login' >&2\nexit 3\n");
  auto got = internal::ProcessCredentialsProvider(script, "dev")->Fetch();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(got.status().message().find("exited with 3: token expired: run aws sso login"), std::string::npos)
      << got.status().message();
  EXPECT_EQ(got.status().message().find("SUPERSECRET"), std::string::npos);
}

TEST_F(ProcessTest, MalformedOutputAndAMissingCommandAreClearErrors) {
  auto bad = internal::ProcessCredentialsProvider(Script("echo 'not json at all'\n"), "dev")->Fetch();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("credential_process of profile 'dev' are not a JSON object"), std::string::npos)
      << bad.status().message();
  auto missing = internal::ProcessCredentialsProvider((dir_ / "no-such-program").string(), "dev")->Fetch();
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("exited with 127"), std::string::npos) << missing.status().message();
  auto huge = internal::ProcessCredentialsProvider(Script("head -c 3000000 /dev/zero\n"), "dev")->Fetch();
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("printed more than"), std::string::npos) << huge.status().message();
}

}  // namespace
}  // namespace s3stream
