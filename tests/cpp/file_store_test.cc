// The file driver: the shared conformance suite over a temporary directory, plus what only a local
// directory can show (paths on disk, temp files, staging directories, symlinks, permissions).
#include "store/file/file_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "store_conformance.h"

namespace s3stream {
namespace {

namespace fs = std::filesystem;

// Temp directories made by this binary, removed when the tests end.
class TempDirs : public ::testing::Environment {
 public:
  static std::string Make(const std::string& tag) {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/s3stream-" + tag + "-XXXXXX";
    char* made = ::mkdtemp(pattern.data());
    if (made == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    std::lock_guard<std::mutex> lock(mu());
    dirs().push_back(pattern);
    // Canonical, so expected paths match the driver's even when TMPDIR is a symlink.
    return fs::canonical(pattern).string();
  }
  void TearDown() override {
    std::lock_guard<std::mutex> lock(mu());
    for (const auto& d : dirs()) {
      std::error_code ec;
      fs::permissions(d, fs::perms::owner_all, fs::perm_options::add, ec);
      fs::remove_all(d, ec);
    }
    dirs().clear();
  }

 private:
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::vector<std::string>& dirs() {
    static std::vector<std::string> d;
    return d;
  }
};
::testing::Environment* const kTempDirs = ::testing::AddGlobalTestEnvironment(new TempDirs);

StoreFactory FileStoreFactory() {
  static const std::string root = TempDirs::Make("conformance") + "/root";
  StoreFactory factory;
  factory.name = "File";
  factory.make = [] { return std::shared_ptr<ObjectStore>(MakeFileStore(root)); };
  factory.reset = [] {
    fs::remove_all(root);
    fs::create_directories(root);
  };
  // Pagination is about boundaries, not volume: 250 keys in pages of 100 covers full and partial pages.
  factory.list_key_count = 250;
  factory.list_page_size = 100;
  return factory;
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(File, StoreConformanceTest, ::testing::Values(FileStoreFactory()), StoreFactoryName);

namespace {

using conformance::Await;
using conformance::HasCode;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, const std::string& data) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out << data;
}

// Every regular file and directory under `dir`, relative, sorted.
std::vector<std::string> Tree(const std::string& dir) {
  std::vector<std::string> out;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator(); ++it) {
    out.push_back(fs::relative(it->path(), dir).string() + (it->is_directory() ? "/" : ""));
  }
  std::sort(out.begin(), out.end());
  return out;
}

class FileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    parent_ = TempDirs::Make("file");
    root_ = parent_ + "/root";
    store_ = MakeFileStore(root_);
  }

  Result<std::string> Put(const std::string& key, const std::string& data) {
    return Await(store_->Put(key, Buffer::CopyOf(std::string_view(data))), "Put");
  }
  Result<std::string> Get(const std::string& key, const GetOptions& options = {}) {
    auto r = Await(GetBuffer(*store_, key, options), "Get");
    if (!r.ok()) return r.status();
    return std::string(r->view());
  }
  Result<ListPage> List(const std::string& prefix, const std::string& delimiter = "", int max_keys = 1000,
                        const std::string& token = "") {
    ListRequest request{prefix, delimiter, token, max_keys};
    return Await(store_->List(request), "List");
  }
  std::vector<std::string> ListKeys(const std::string& prefix) {
    std::vector<std::string> keys;
    Status status = ListEach(store_, ListRequest{prefix, "", "", 1000}, [&](const ListPage& page) {
      for (const auto& o : page.objects) keys.push_back(o.key);
      return Status::Ok();
    });
    EXPECT_TRUE(status.ok()) << status.ToString();
    return keys;
  }

  std::string parent_;
  std::string root_;
  std::shared_ptr<ObjectStore> store_;
};

TEST_F(FileStoreTest, DescribeIsAFileUrl) {
  EXPECT_EQ(MakeFileStore("/")->Describe("data/x.tar"), "file:///data/x.tar");
  EXPECT_EQ(store_->Describe("a b/c.bin"), "file://" + root_ + "/a b/c.bin");
  EXPECT_EQ(MakeFileStore(root_ + "/")->Describe("k"), "file://" + root_ + "/k");
  EXPECT_EQ(MakeFileStore("rel/dir")->Describe("k"), "file://" + fs::current_path().string() + "/rel/dir/k");
}

TEST_F(FileStoreTest, KeysAreFilesUnderTheRoot) {
  ASSERT_TRUE(Put("a/b/c.bin", "hello").ok());
  EXPECT_EQ(ReadFile(root_ + "/a/b/c.bin"), "hello");

  // Files put there by other programs are objects too.
  WriteFile(root_ + "/external/file.txt", "from outside");
  auto got = Get("external/file.txt");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "from outside");
  EXPECT_EQ(ListKeys(""), (std::vector<std::string>{"a/b/c.bin", "external/file.txt"}));
}

TEST_F(FileStoreTest, MissingFileNamesThePath) {
  auto got = Get("nope/missing.bin");
  EXPECT_TRUE(HasCode(got.status(), StatusCode::kNotFound));
  EXPECT_EQ(got.status().message(), "file://" + root_ + "/nope/missing.bin does not exist");
  // Also when a path segment is a file.
  ASSERT_TRUE(Put("file", "x").ok());
  EXPECT_TRUE(HasCode(Get("file/below").status(), StatusCode::kNotFound));
}

TEST_F(FileStoreTest, OutOfRangeMessageNamesObjectRangeAndSize) {
  ASSERT_TRUE(Put("r.bin", std::string(10, 'x')).ok());
  GetOptions options;
  options.range = ByteRange{4, 12};
  auto got = Get("r.bin", options);
  ASSERT_TRUE(HasCode(got.status(), StatusCode::kOutOfRange));
  const std::string& m = got.status().message();
  EXPECT_NE(m.find("file://" + root_ + "/r.bin"), std::string::npos) << m;
  EXPECT_NE(m.find("[4, 12)"), std::string::npos) << m;
  EXPECT_NE(m.find("10 bytes"), std::string::npos) << m;
}

TEST_F(FileStoreTest, PutIsAtomicAndLeavesNoTempFiles) {
  ASSERT_TRUE(Put("dir/obj", "one").ok());
  ASSERT_TRUE(Put("dir/obj", "two, longer").ok());
  ASSERT_TRUE(Put("dir/other", "").ok());
  EXPECT_EQ(Tree(root_), (std::vector<std::string>{"dir/", "dir/obj", "dir/other"}));

  // A reader racing a writer sees one whole version or the other, never a mix or a partial file.
  const std::string a(1 << 20, 'a');
  const std::string b(2 << 20, 'b');
  ASSERT_TRUE(Put("race", a).ok());
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 0; i < 40; ++i) ASSERT_TRUE(Put("race", i % 2 ? a : b).ok());
    done = true;
  });
  int reads = 0;
  while (!done || reads < 10) {
    auto got = Get("race");
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(*got == a || *got == b) << "read a torn object of " << got->size() << " bytes";
    ++reads;
  }
  writer.join();
  EXPECT_EQ(Tree(root_), (std::vector<std::string>{"dir/", "dir/obj", "dir/other", "race"}));
}

TEST_F(FileStoreTest, PutCannotMixAKeyAndKeysBelowIt) {
  ASSERT_TRUE(Put("d/x", "x").ok());
  EXPECT_TRUE(HasCode(Put("d", "y").status(), StatusCode::kInvalidArgument));
  ASSERT_TRUE(Put("f", "x").ok());
  EXPECT_TRUE(HasCode(Put("f/x", "y").status(), StatusCode::kInvalidArgument));
  EXPECT_EQ(ReadFile(root_ + "/f"), "x");
}

TEST_F(FileStoreTest, DirectoryKeyIsNotFound) {
  ASSERT_TRUE(Put("dir/file", "data").ok());
  EXPECT_TRUE(HasCode(Get("dir").status(), StatusCode::kNotFound));
  EXPECT_TRUE(HasCode(Await(store_->Head("dir"), "Head").status(), StatusCode::kNotFound));
  // Deleting it deletes no object, and removes nothing.
  EXPECT_TRUE(Await(store_->Delete("dir"), "Delete").ok());
  EXPECT_TRUE(Get("dir/file").ok());
}

TEST_F(FileStoreTest, DeleteLeavesDirectoriesAlone) {
  ASSERT_TRUE(Put("a/b/c", "x").ok());
  ASSERT_TRUE(Await(store_->Delete("a/b/c"), "Delete").ok());
  EXPECT_TRUE(fs::is_directory(root_ + "/a/b"));
  EXPECT_TRUE(ListKeys("").empty());
}

TEST_F(FileStoreTest, KeysEscapingTheRootAreRejected) {
  WriteFile(parent_ + "/secret", "outside");
  for (const std::string key : {"..", "../secret", "a/../../secret", "a/..", "./x", "a/./b", "a//b", "/abs", "a/", ""}) {
    SCOPED_TRACE("key \"" + key + "\"");
    EXPECT_TRUE(HasCode(Put(key, "x").status(), StatusCode::kInvalidArgument));
    EXPECT_TRUE(HasCode(Get(key).status(), StatusCode::kInvalidArgument));
    EXPECT_TRUE(HasCode(Await(store_->Head(key), "Head").status(), StatusCode::kInvalidArgument));
    EXPECT_TRUE(HasCode(Await(store_->Delete(key), "Delete"), StatusCode::kInvalidArgument));
    EXPECT_TRUE(HasCode(Await(store_->CreateMultipartUpload(key), "Create").status(), StatusCode::kInvalidArgument));
  }
  EXPECT_EQ(ReadFile(parent_ + "/secret"), "outside");
  EXPECT_TRUE(HasCode(List("../").status(), StatusCode::kInvalidArgument));
  EXPECT_TRUE(HasCode(List("a/../").status(), StatusCode::kInvalidArgument));
}

TEST_F(FileStoreTest, ReservedNamesAreRejected) {
  for (const std::string key : {".s3stream-multipart/x", ".s3stream-multipart", "a/.s3stream-multipart",
                                "a/.s3stream-multipart/b", "a/.s3stream-tmp-1234", ".s3stream-tmp-/b"}) {
    SCOPED_TRACE(key);
    EXPECT_TRUE(HasCode(Put(key, "x").status(), StatusCode::kInvalidArgument));
    EXPECT_TRUE(HasCode(Await(store_->CreateMultipartUpload(key), "Create").status(), StatusCode::kInvalidArgument));
  }
  // Names merely containing them are fine.
  EXPECT_TRUE(Put("a/.s3stream-multipart-not", "x").ok());
  EXPECT_TRUE(Put("x.s3stream-tmp-", "x").ok());
}

TEST_F(FileStoreTest, ListSkipsTempFilesAndStaging) {
  ASSERT_TRUE(Put("a/real", "x").ok());
  WriteFile(root_ + "/a/.s3stream-tmp-0123abcd", "partial");
  auto id = Await(store_->CreateMultipartUpload("a/mp"), "Create");
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(Await(store_->UploadPart("a/mp", *id, 1, Buffer::CopyOf(std::string_view("x"))), "Upload").ok());
  auto only_upload = Await(store_->CreateMultipartUpload("b/mp"), "Create");  // b/ holds no object yet
  ASSERT_TRUE(only_upload.ok());
  ASSERT_TRUE(Await(store_->CreateMultipartUpload("top"), "Create").ok());
  EXPECT_EQ(ListKeys(""), (std::vector<std::string>{"a/real"}));
  auto top = List("", "/");
  ASSERT_TRUE(top.ok());
  EXPECT_EQ(top->common_prefixes, (std::vector<std::string>{"a/"}));
  EXPECT_TRUE(top->objects.empty());
  EXPECT_TRUE(ListKeys("a/.s3stream-multipart/").empty());
  EXPECT_TRUE(ListKeys(".s3stream-multipart/").empty());
}

TEST_F(FileStoreTest, ListPagesAreExact) {
  std::vector<std::string> keys;
  for (int i = 0; i < 200; ++i) {
    char key[32];
    std::snprintf(key, sizeof key, "k%04d", i);
    WriteFile(root_ + "/" + key, "x");
    keys.push_back(key);
  }
  // 200 keys in pages of 100: two full pages and no empty third one.
  auto p1 = List("", "", 100);
  ASSERT_TRUE(p1.ok());
  EXPECT_EQ(p1->objects.size(), 100u);
  EXPECT_FALSE(p1->next_continuation_token.empty());
  auto p2 = List("", "", 100, p1->next_continuation_token);
  ASSERT_TRUE(p2.ok());
  EXPECT_EQ(p2->objects.size(), 100u);
  EXPECT_EQ(p2->objects.front().key, "k0100");
  EXPECT_TRUE(p2->next_continuation_token.empty());

  // max_keys is capped at 1000 as on S3; zero gives an empty last page.
  for (int i = 0; i < 1005; ++i) WriteFile(root_ + "/many/" + std::to_string(i), "");
  auto big = List("many/", "", 5000);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->objects.size(), 1000u);
  EXPECT_FALSE(big->next_continuation_token.empty());
  auto none = List("many/", "", 0);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->objects.empty());
  EXPECT_TRUE(none->next_continuation_token.empty());

  EXPECT_TRUE(HasCode(List("many/", "", 10, "k0001").status(), StatusCode::kInvalidArgument));
  EXPECT_TRUE(HasCode(List("", "", -1).status(), StatusCode::kInvalidArgument));
}

TEST_F(FileStoreTest, ListWithOtherDelimiters) {
  for (const char* key : {"x/train-0-a", "x/train-0-b", "x/train-1", "x/test", "x/t-dir/f"}) WriteFile(root_ + "/" + key, "");
  auto page = List("x/", "-");
  ASSERT_TRUE(page.ok());
  std::vector<std::string> keys;
  for (const auto& o : page->objects) keys.push_back(o.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"x/test"}));
  EXPECT_EQ(page->common_prefixes, (std::vector<std::string>{"x/t-", "x/train-"}));
  // Page by page, each item once.
  std::vector<std::string> items;
  Status status = ListEach(store_, ListRequest{"x/train-", "-", "", 1}, [&](const ListPage& p) {
    for (const auto& o : p.objects) items.push_back(o.key);
    for (const auto& cp : p.common_prefixes) items.push_back(cp);
    return Status::Ok();
  });
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(items, (std::vector<std::string>{"x/train-0-", "x/train-1"}));
}

TEST_F(FileStoreTest, ListDoesNotFollowSymlinksOutOfTheRootOrInLoops) {
  WriteFile(root_ + "/real/f", "x");
  WriteFile(parent_ + "/outside/g", "y");
  fs::create_directory_symlink(root_ + "/real", root_ + "/alias");    // inside the root: followed
  fs::create_directory_symlink(parent_ + "/outside", root_ + "/out");  // leaves the root: skipped
  fs::create_directory_symlink(root_, root_ + "/loop");                // the root itself: skipped
  fs::create_directory_symlink(root_ + "/real", root_ + "/real/up");   // its own parent: skipped
  fs::create_symlink(root_ + "/missing", root_ + "/dangling");
  EXPECT_EQ(ListKeys(""), (std::vector<std::string>{"alias/f", "real/f"}));
  EXPECT_TRUE(ListKeys("out/").empty());
}

TEST_F(FileStoreTest, FifoIsNotAnObjectAndDoesNotHang) {
  fs::create_directories(root_);
  ASSERT_EQ(::mkfifo((root_ + "/pipe").c_str(), 0600), 0);
  EXPECT_TRUE(HasCode(Get("pipe").status(), StatusCode::kNotFound));
  EXPECT_TRUE(ListKeys("").empty());
}

TEST_F(FileStoreTest, UnreadableFileIsPermissionDenied) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores file permissions";
  ASSERT_TRUE(Put("locked", "x").ok());
  ASSERT_EQ(::chmod((root_ + "/locked").c_str(), 0), 0);
  EXPECT_TRUE(HasCode(Get("locked").status(), StatusCode::kPermissionDenied));
}

TEST_F(FileStoreTest, EtagTracksTheFileNotItsReads) {
  auto etag = Put("e", "content");
  ASSERT_TRUE(etag.ok());
  EXPECT_EQ(etag->find('"'), std::string::npos);
  ASSERT_TRUE(Get("e").ok());
  auto head = Await(store_->Head("e"), "Head");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->etag, *etag);
  EXPECT_EQ(head->last_modified.size(), 24u) << head->last_modified;  // 2024-01-02T03:04:05.678Z
  EXPECT_EQ(head->last_modified.back(), 'Z');

  // Another program rewriting the file in place (same size, new mtime) changes the ETag.
  struct timespec times[2] = {{0, UTIME_OMIT}, {12345, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (root_ + "/e").c_str(), times, 0), 0);
  head = Await(store_->Head("e"), "Head");
  ASSERT_TRUE(head.ok());
  EXPECT_NE(head->etag, *etag);
  EXPECT_EQ(head->last_modified, "1970-01-01T03:25:45.000Z");

  // Quoted ETags, as S3 tools print them, are accepted by if_match.
  GetOptions options;
  options.if_match = "\"" + head->etag + "\"";
  EXPECT_TRUE(Get("e", options).ok());
}

TEST_F(FileStoreTest, MultipartStagingIsCleanedUp) {
  const std::string staging = root_ + "/mp/.s3stream-multipart";
  auto id = Await(store_->CreateMultipartUpload("mp/done"), "Create");
  ASSERT_TRUE(id.ok());
  EXPECT_TRUE(fs::is_directory(staging + "/" + *id));
  auto etag = Await(store_->UploadPart("mp/done", *id, 1, Buffer::CopyOf(std::string_view("part one"))), "Upload");
  ASSERT_TRUE(etag.ok());
  ASSERT_TRUE(Await(store_->CompleteMultipartUpload("mp/done", *id, {{1, *etag}}), "Complete").ok());
  EXPECT_FALSE(fs::exists(staging + "/" + *id));
  EXPECT_EQ(ReadFile(root_ + "/mp/done"), "part one");

  auto aborted = Await(store_->CreateMultipartUpload("mp/aborted"), "Create");
  ASSERT_TRUE(aborted.ok());
  ASSERT_TRUE(Await(store_->UploadPart("mp/aborted", *aborted, 1, Buffer::CopyOf(std::string_view("x"))), "Upload").ok());
  ASSERT_TRUE(Await(store_->AbortMultipartUpload("mp/aborted", *aborted), "Abort").ok());
  EXPECT_FALSE(fs::exists(staging + "/" + *aborted));
  EXPECT_FALSE(fs::exists(root_ + "/mp/aborted"));
  EXPECT_EQ(Tree(root_), (std::vector<std::string>{"mp/", "mp/done"})) << "the staging root goes with its last upload";
}

TEST_F(FileStoreTest, MultipartStagesBesideTheTargetEvenForRootSlash) {
  // The client serves file:// URLs with the root "/": staging must not need write access to "/".
  auto slash = MakeFileStore("/");
  const std::string key = root_.substr(1) + "/ckpt/model.pt";
  auto id = Await(slash->CreateMultipartUpload(key), "Create");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_TRUE(fs::is_directory(root_ + "/ckpt/.s3stream-multipart/" + *id));
  const std::string data = conformance::Bytes(6 << 20, 7);
  auto p1 = Await(slash->UploadPart(key, *id, 1, Buffer::CopyOf(std::string_view(data).substr(0, 5 << 20))), "Upload");
  auto p2 = Await(slash->UploadPart(key, *id, 2, Buffer::CopyOf(std::string_view(data).substr(5 << 20))), "Upload");
  ASSERT_TRUE(p1.ok() && p2.ok());
  ASSERT_TRUE(Await(slash->CompleteMultipartUpload(key, *id, {{1, *p1}, {2, *p2}}), "Complete").ok());
  EXPECT_TRUE(ReadFile(root_ + "/ckpt/model.pt") == data);
  EXPECT_EQ(Tree(root_), (std::vector<std::string>{"ckpt/", "ckpt/model.pt"}));
}

TEST_F(FileStoreTest, ListedUploadsAreOnlyThoseAbortCanFind) {
  auto id = Await(store_->CreateMultipartUpload("ckpt/model.pt"), "Create");
  ASSERT_TRUE(id.ok());
  const std::string staging = root_ + "/ckpt/.s3stream-multipart/";
  // Planted or half-made staging directories: no key file, a key file naming another directory's
  // key, a key file that is a directory. None is an upload Abort would find, so none is listed.
  fs::create_directories(staging + "aaaa");
  fs::create_directories(staging + "bbbb");
  std::ofstream(staging + "bbbb/key") << "elsewhere/model.pt";
  fs::create_directories(staging + "cccc/key");
  Result<std::vector<UploadInfo>> uploads = ListUploads(*store_, "");
  ASSERT_TRUE(uploads.ok()) << uploads.status().ToString();
  ASSERT_EQ(uploads->size(), 1u);
  EXPECT_EQ((*uploads)[0].key, "ckpt/model.pt");
  EXPECT_EQ((*uploads)[0].upload_id, *id);
  EXPECT_EQ((*uploads)[0].initiated.size(), std::string("2026-01-01T00:00:00.000Z").size()) << (*uploads)[0].initiated;

  // Reserved names and dot segments name no key.
  EXPECT_TRUE(ListUploads(*store_, "ckpt/.s3stream-multipart/").value().empty());
  EXPECT_TRUE(HasCode(ListUploads(*store_, "ckpt/../").status(), StatusCode::kInvalidArgument));
  EXPECT_TRUE(Await(store_->AbortMultipartUpload("ckpt/model.pt", *id), "Abort").ok());
}

TEST_F(FileStoreTest, MultipartRejectsPartsOutOfOrder) {
  const std::string key = "mp/order";
  auto id = Await(store_->CreateMultipartUpload(key), "Create");
  ASSERT_TRUE(id.ok());
  std::vector<CompletedPart> parts;
  for (int n = 1; n <= 2; ++n) {
    auto etag = Await(store_->UploadPart(key, *id, n, Buffer::CopyOf(std::string_view(conformance::Bytes(5 << 20, n)))), "Upload");
    ASSERT_TRUE(etag.ok());
    parts.push_back({n, *etag});
  }
  Status status = Await(store_->CompleteMultipartUpload(key, *id, {parts[1], parts[0]}), "Complete");
  EXPECT_TRUE(HasCode(status, StatusCode::kInvalidArgument));
  EXPECT_NE(status.message().find("part 1 follows part 2"), std::string::npos) << status.message();
  status = Await(store_->CompleteMultipartUpload(key, *id, {parts[0], parts[0]}), "Complete");
  EXPECT_TRUE(HasCode(status, StatusCode::kInvalidArgument));
  status = Await(store_->CompleteMultipartUpload(key, *id, {parts[0], {3, "x"}}), "Complete");
  EXPECT_TRUE(HasCode(status, StatusCode::kInvalidArgument));
  EXPECT_NE(status.message().find("part 3"), std::string::npos) << status.message();
  status = Await(store_->CompleteMultipartUpload(key, *id, {}), "Complete");
  EXPECT_TRUE(HasCode(status, StatusCode::kInvalidArgument));
  EXPECT_FALSE(fs::exists(root_ + "/mp/order"));
  for (const std::string& entry : Tree(root_ + "/mp")) {
    // Only the still-open upload's staging directory: no object, no temp file.
    EXPECT_EQ(entry.rfind(".s3stream-multipart/", 0), 0u) << entry;
    EXPECT_EQ(entry.find(".s3stream-tmp-"), std::string::npos) << entry;
  }
}

TEST_F(FileStoreTest, MultipartUnknownUploadIsNotFound) {
  for (const std::string id : {"no-such-upload-id", "0123456789abcdef0123456789abcdef", "../../x", ""}) {
    SCOPED_TRACE("id \"" + id + "\"");
    auto part = Await(store_->UploadPart("k", id, 1, Buffer::CopyOf(std::string_view("x"))), "Upload");
    EXPECT_TRUE(HasCode(part.status(), StatusCode::kNotFound));
    EXPECT_NE(part.status().message().find("no such multipart upload"), std::string::npos);
    EXPECT_TRUE(HasCode(Await(store_->CompleteMultipartUpload("k", id, {{1, "e"}}), "Complete"), StatusCode::kNotFound));
    EXPECT_TRUE(HasCode(Await(store_->AbortMultipartUpload("k", id), "Abort"), StatusCode::kNotFound));
  }
  // An upload id belongs to its key.
  auto id = Await(store_->CreateMultipartUpload("k"), "Create");
  ASSERT_TRUE(id.ok());
  auto part = Await(store_->UploadPart("other", *id, 1, Buffer::CopyOf(std::string_view("x"))), "Upload");
  EXPECT_TRUE(HasCode(part.status(), StatusCode::kNotFound));
  EXPECT_TRUE(HasCode(Await(store_->AbortMultipartUpload("other", *id), "Abort"), StatusCode::kNotFound));
  EXPECT_TRUE(Await(store_->AbortMultipartUpload("k", *id), "Abort").ok());
}

TEST_F(FileStoreTest, MultipartPartNumbersAreBounded) {
  auto id = Await(store_->CreateMultipartUpload("k"), "Create");
  ASSERT_TRUE(id.ok());
  for (int n : {0, -1, 10001}) {
    auto part = Await(store_->UploadPart("k", *id, n, Buffer::CopyOf(std::string_view("x"))), "Upload");
    EXPECT_TRUE(HasCode(part.status(), StatusCode::kInvalidArgument)) << n;
  }
  EXPECT_TRUE(Await(store_->UploadPart("k", *id, 10000, Buffer::CopyOf(std::string_view("x"))), "Upload").ok());
}

TEST_F(FileStoreTest, DestroyingTheStoreCompletesQueuedOperations) {
  ASSERT_TRUE(Put("obj", std::string(100000, 'z')).ok());
  std::vector<Future<Result<Buffer>>> gets;
  std::vector<Future<Result<ObjectInfo>>> heads;
  for (int i = 0; i < 100; ++i) {
    gets.push_back(GetBuffer(*store_, "obj"));
    heads.push_back(store_->Head("obj"));
  }
  store_.reset();  // drains the queue, then joins the threads
  for (auto& f : gets) {
    ASSERT_TRUE(f.ready());
    ASSERT_TRUE(f.Wait().ok());
    EXPECT_EQ(f.Wait()->size(), 100000u);
  }
  for (auto& f : heads) {
    ASSERT_TRUE(f.ready());
    EXPECT_TRUE(f.Wait().ok());
  }
}

TEST_F(FileStoreTest, ACallbackMayDestroyTheStore) {
  ASSERT_TRUE(Put("obj", std::string(8 << 20, 'q')).ok());
  auto holder = std::make_shared<std::shared_ptr<ObjectStore>>(std::move(store_));  // the only reference
  std::promise<void> destroyed;
  auto get = GetBuffer(**holder, "obj");
  get.Then([holder, &destroyed](const Result<Buffer>&) {
    holder->reset();  // usually on the store's own worker thread
    destroyed.set_value();
  });
  destroyed.get_future().wait();
  EXPECT_TRUE(get.Wait().ok());
}

TEST_F(FileStoreTest, UsableInAForkedChild) {
  // DataLoader workers fork after the parent used the store: the child must get working threads of
  // its own, not wait on the parent's (which do not exist in the child).
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer does not support threads started after a multi-threaded fork";
#endif
  ASSERT_TRUE(Put("parent", "p").ok());
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::alarm(30);  // a hang in the child fails the test instead of hanging it
    auto got = Await(GetBuffer(*store_, "parent"), "Get");
    auto put = Await(store_->Put("child", Buffer::CopyOf(std::string_view("c"))), "Put");
    ::_exit(got.ok() && got->view() == "p" && put.ok() ? 0 : 1);
  }
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus)) << "child died with signal " << (WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0);
  EXPECT_EQ(WEXITSTATUS(wstatus), 0);
  auto got = Get("child");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "c");
}

TEST_F(FileStoreTest, RootIsCreatedOnFirstPut) {
  EXPECT_FALSE(fs::exists(root_));
  EXPECT_TRUE(HasCode(Get("x").status(), StatusCode::kNotFound));
  auto empty = List("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->objects.empty());
  ASSERT_TRUE(Put("x", "1").ok());
  EXPECT_EQ(ReadFile(root_ + "/x"), "1");
}

}  // namespace
}  // namespace s3stream
