#include "s3stream/webdataset.h"

#include <gtest/gtest.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "format/gzip_stream.h"
#include "s3stream/tar.h"

namespace s3stream {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path TestdataDir() {
  const char* env = std::getenv("S3STREAM_TESTDATA_DIR");
  return (env != nullptr && *env != '\0' ? fs::path(env) : fs::path(S3STREAM_TESTDATA_DIR)) / "webdataset";
}

fs::path GoldenDir() { return fs::path(__FILE__).parent_path() / "golden"; }

std::string Sha256Hex(const Buffer& b) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(b.data(), b.size(), digest);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : digest) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// A minimal JSON reader for the goldens (objects, arrays, strings with \u escapes, integers).

struct Json {
  enum Kind { kNull, kNumber, kString, kArray, kObject } kind = kNull;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  std::map<std::string, Json> object;
  const Json& operator[](const std::string& k) const { return object.at(k); }
};

class JsonReader {
 public:
  explicit JsonReader(std::string_view text) : s_(text) {}
  Json Parse() {
    Json v = Value();
    Space();
    if (i_ != s_.size()) throw std::runtime_error("trailing JSON");
    return v;
  }

 private:
  void Space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  char Next() {
    Space();
    if (i_ >= s_.size()) throw std::runtime_error("JSON ends early");
    return s_[i_];
  }
  void Expect(char c) {
    if (Next() != c) throw std::runtime_error(std::string("JSON: expected ") + c);
    ++i_;
  }
  static void PutUtf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }
  uint32_t Hex4() {
    uint32_t v = std::stoul(std::string(s_.substr(i_, 4)), nullptr, 16);
    i_ += 4;
    return v;
  }
  std::string String() {
    Expect('"');
    std::string out;
    while (s_.at(i_) != '"') {
      char c = s_[i_++];
      if (c != '\\') {
        out += c;
        continue;
      }
      char e = s_.at(i_++);
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          uint32_t cp = Hex4();
          if (cp >= 0xd800 && cp < 0xdc00 && s_.substr(i_, 2) == "\\u") {
            i_ += 2;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (Hex4() - 0xdc00);
          }
          PutUtf8(out, cp);
          break;
        }
        default: out += e;
      }
    }
    ++i_;
    return out;
  }
  Json Value() {
    Json v;
    char c = Next();
    if (c == '{') {
      v.kind = Json::kObject;
      ++i_;
      if (Next() == '}') return ++i_, v;
      for (;;) {
        std::string k = String();
        Expect(':');
        v.object[k] = Value();
        if (Next() == ',') { ++i_; continue; }
        Expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Json::kArray;
      ++i_;
      if (Next() == ']') return ++i_, v;
      for (;;) {
        v.array.push_back(Value());
        if (Next() == ',') { ++i_; continue; }
        Expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Json::kString;
      v.string = String();
      return v;
    }
    size_t end = i_;
    while (end < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[end])) || s_[end] == '-')) ++end;
    if (end == i_) throw std::runtime_error("JSON: unexpected character");
    v.kind = Json::kNumber;
    v.number = std::stod(std::string(s_.substr(i_, end - i_)));
    i_ = end;
    return v;
  }

  std::string_view s_;
  size_t i_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Reading a shard the way the shard reader will: chunks -> (gzip) -> TarParser -> SampleGrouper.

struct ShardResult {
  Status status;
  std::vector<Sample> samples;
};

ShardResult ReadShard(const std::string& bytes, size_t chunk, const std::string& source, bool gzip) {
  ShardResult out;
  SampleGrouper grouper(source);
  auto on_sample = [&](Sample&& s) {
    out.samples.push_back(std::move(s));
    return Status::Ok();
  };
  TarParser parser(source);
  auto on_member = [&](TarMember&& m) { return grouper.Add(std::move(m), on_sample); };
  internal::GzipInflater inflater(source, 64 << 10);
  auto on_tar_bytes = [&](Buffer b) { return parser.Feed(b, on_member); };
  for (size_t pos = 0; pos < bytes.size(); pos += chunk) {
    Buffer piece = Buffer::CopyOf(std::string_view(bytes).substr(pos, chunk));
    out.status = gzip ? inflater.Feed(piece.span(), on_tar_bytes) : parser.Feed(piece, on_member);
    if (!out.status.ok()) return out;
  }
  if (gzip) out.status = inflater.Finish();
  if (out.status.ok()) out.status = parser.Finish();
  if (out.status.ok()) out.status = grouper.Finish(on_sample);
  return out;
}

std::vector<std::string> GoldenShards() {
  return {"compressed.tar", "mpdata.tar", "sample.tgz", "tendata.tar", "testgz.tar", "tricky.tar"};
}

class GoldenTest : public ::testing::TestWithParam<std::tuple<std::string, size_t>> {};

TEST_P(GoldenTest, SamplesMatchWebDataset) {
  const auto& [shard, chunk] = GetParam();
  fs::path path = shard == "tricky.tar" ? GoldenDir() / shard : TestdataDir() / shard;
  std::string bytes = ReadFile(path);
  ASSERT_FALSE(bytes.empty()) << path;
  Json golden = JsonReader(ReadFile(GoldenDir() / (shard + ".json"))).Parse();
  const auto& expected = golden["samples"].array;

  ShardResult got = ReadShard(bytes, chunk == 0 ? bytes.size() : chunk, "s3://test/" + shard,
                              internal::IsGzipShardName(shard));
  ASSERT_TRUE(got.status.ok()) << got.status.ToString();
  ASSERT_EQ(got.samples.size(), expected.size());
  uint64_t last_offset = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const Sample& s = got.samples[i];
    const Json& e = expected[i];
    SCOPED_TRACE("sample " + std::to_string(i) + " key " + e["key"].string);
    EXPECT_EQ(s.key, e["key"].string);
    std::vector<std::pair<std::string, const Buffer*>> fields;
    for (const auto& [ext, data] : s.fields) fields.emplace_back(ext, &data);
    std::sort(fields.begin(), fields.end());
    ASSERT_EQ(fields.size(), e["fields"].array.size());
    for (size_t f = 0; f < fields.size(); ++f) {
      const Json& ef = e["fields"].array[f];
      EXPECT_EQ(fields[f].first, ef["ext"].string);
      EXPECT_EQ(fields[f].second->size(), static_cast<size_t>(ef["size"].number));
      EXPECT_EQ(Sha256Hex(*fields[f].second), ef["sha256"].string);
    }
    if (i > 0) {
      EXPECT_GT(s.offset, last_offset);
    }
    EXPECT_GT(s.end_offset, s.offset);
    EXPECT_EQ(s.end_offset % kTarBlockSize, 0u);
    last_offset = s.offset;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shards, GoldenTest,
    ::testing::Combine(::testing::ValuesIn(GoldenShards()),
                       ::testing::Values(size_t{1}, size_t{511}, size_t{512}, size_t{513}, size_t{64 << 10},
                                         size_t{0} /* whole */)),
    [](const auto& info) {
      std::string name = std::get<0>(info.param);
      std::replace(name.begin(), name.end(), '.', '_');
      size_t chunk = std::get<1>(info.param);
      return name + "_" + (chunk == 0 ? std::string("whole") : std::to_string(chunk));
    });

// ---------------------------------------------------------------------------------------------
// Name rules, with the answers of webdataset 1.0.2 (base_plus_ext and tar_file_iterator's filter).

TEST(SplitKeyExtensionTest, MatchesBasePlusExt) {
  struct Case {
    std::string name;
    bool ok;
    std::string key, ext;
  };
  const std::vector<Case> cases = {
      {"a.jpg", true, "a", "jpg"},
      {"dir/a.jpg", true, "dir/a", "jpg"},
      {"a.b.c", true, "a", "b.c"},
      {"a.", true, "a", ""},
      {"a..b", true, "a", ".b"},
      {".jpg", false, "", ""},
      {"README", false, "", ""},
      {"dir/README", false, "", ""},
      {"d/.x.y", true, "d/", "x.y"},
      {"d1/d2/.f.jpg", true, "d1/d2/", "f.jpg"},
      {"a.b/.f.jpg", false, "", ""},
      {"a.b/c/.f.jpg", true, "a.b/c/", "f.jpg"},
      {"a.b/c", false, "", ""},
      {"x/y.z/w.jpg", true, "x/y.z/w", "jpg"},
      {"x\ny/a.jpg", true, "x\ny/a", "jpg"},
      {"x\ny/.a.jpg", true, "x\ny/", "a.jpg"},
      {"x/y\n/.a.jpg", true, "x/y\n/", "a.jpg"},
      {"a.b/\n/.f.jpg", true, "a.b/\n/", "f.jpg"},
      {"/a.jpg", true, "/a", "jpg"},
      {"/.a.jpg", true, "/", "a.jpg"},
      {"a/b/", false, "", ""},
      {"IMG.JPG", true, "IMG", "JPG"},
      {"a.jpg\n", true, "a", "jpg\n"},
      {"..", false, "", ""},
      {"a/.", true, "a/", ""},
      {"a/b.c/", false, "", ""},
  };
  for (const auto& c : cases) {
    std::string key, ext;
    EXPECT_EQ(SplitKeyExtension(c.name, &key, &ext), c.ok) << c.name;
    if (c.ok) {
      EXPECT_EQ(key, c.key) << c.name;
      EXPECT_EQ(ext, c.ext) << c.name;
    }
  }
}

TEST(WebDatasetMetaNameTest, MatchesTarFileIterator) {
  const std::vector<std::pair<std::string, bool>> cases = {
      {"__", true},          {"___", true},         {"____", true},        {"__x__", true},
      {"__x__.jpg", false},  {"__x__/y.jpg", true}, {"a/__x__.jpg", false}, {"__key__", true},
      {"__x__\n", true},     {"__x__\n/", false},   {"__a/b__", false},    {"___/x", false},
      {"__x___y__/z", true}, {"_x__", false},       {"__x__y", false},     {"a.jpg", false},
  };
  for (const auto& [name, meta] : cases) EXPECT_EQ(IsWebDatasetMetaName(name), meta) << name;
}

// ---------------------------------------------------------------------------------------------
// SampleGrouper on members made here.

TarMember Member(std::string name, std::string data, uint64_t header_offset) {
  TarMember m;
  m.name = std::move(name);
  m.header_offset = header_offset;
  m.data_offset = header_offset + kTarBlockSize;
  m.size = data.size();
  m.data = Buffer::CopyOf(data);
  return m;
}

struct Grouped {
  Status status;
  std::vector<Sample> samples;
};

Grouped Group(const std::vector<std::pair<std::string, std::string>>& members) {
  Grouped out;
  SampleGrouper grouper("s3://b/shard-000.tar");
  auto on_sample = [&](Sample&& s) {
    out.samples.push_back(std::move(s));
    return Status::Ok();
  };
  uint64_t offset = 0;
  for (const auto& [name, data] : members) {
    out.status = grouper.Add(Member(name, data, offset), on_sample);
    if (!out.status.ok()) return out;
    offset += kTarBlockSize + (data.size() + kTarBlockSize - 1) / kTarBlockSize * kTarBlockSize;
  }
  out.status = grouper.Finish(on_sample);
  return out;
}

TEST(SampleGrouperTest, GroupsConsecutiveKeysInOrder) {
  Grouped g = Group({{"a.jpg", "A"}, {"a.cls", "1"}, {"b.jpg", "BB"}, {"b.cls", "2"}});
  ASSERT_TRUE(g.status.ok()) << g.status.ToString();
  ASSERT_EQ(g.samples.size(), 2u);
  EXPECT_EQ(g.samples[0].key, "a");
  ASSERT_EQ(g.samples[0].fields.size(), 2u);
  EXPECT_EQ(g.samples[0].fields[0].first, "jpg");
  EXPECT_EQ(g.samples[0].fields[1].first, "cls");
  EXPECT_EQ(g.samples[0].Find("jpg")->view(), "A");
  EXPECT_EQ(g.samples[0].Find("png"), nullptr);
  EXPECT_EQ(g.samples[0].offset, 0u);
  EXPECT_EQ(g.samples[0].end_offset, 2048u);
  EXPECT_EQ(g.samples[1].key, "b");
  EXPECT_EQ(g.samples[1].offset, 2048u);
  EXPECT_EQ(g.samples[1].end_offset, 4096u);
}

TEST(SampleGrouperTest, LowercasesExtensionsAndSkipsWhatWebDatasetSkips) {
  Grouped g = Group({{"a.JPG", "A"}, {"README", "x"}, {"__meta__", "m"}, {"a.Seg.PNG", "P"}, {"a.json", "{}"}});
  ASSERT_TRUE(g.status.ok()) << g.status.ToString();
  ASSERT_EQ(g.samples.size(), 1u);
  ASSERT_EQ(g.samples[0].fields.size(), 3u);
  EXPECT_EQ(g.samples[0].fields[0].first, "jpg");
  EXPECT_EQ(g.samples[0].fields[1].first, "seg.png");
  EXPECT_EQ(g.samples[0].key, "a");
}

TEST(SampleGrouperTest, RepeatedExtensionIsCorruptNamingShardKeyExtensionAndOffset) {
  Grouped g = Group({{"a.jpg", "A"}, {"a.cls", "1"}, {"a.jpg", "again"}});
  ASSERT_EQ(g.status.code(), StatusCode::kCorrupt);
  const std::string& m = g.status.message();
  EXPECT_NE(m.find("s3://b/shard-000.tar"), std::string::npos) << m;
  EXPECT_NE(m.find("offset 2048"), std::string::npos) << m;
  EXPECT_NE(m.find("\"a\""), std::string::npos) << m;
  EXPECT_NE(m.find("\"jpg\""), std::string::npos) << m;
  EXPECT_TRUE(g.samples.empty());
}

TEST(SampleGrouperTest, RepeatedExtensionDiffersOnlyInCase) {
  Grouped g = Group({{"a.jpg", "A"}, {"a.JPG", "B"}});
  EXPECT_EQ(g.status.code(), StatusCode::kCorrupt);
}

TEST(SampleGrouperTest, ReservedExtensionsAreCorrupt) {
  EXPECT_EQ(Group({{"a.__key__", "k"}}).status.code(), StatusCode::kCorrupt);
  EXPECT_EQ(Group({{"a.jpg", "A"}, {"a.__URL__", "u"}}).status.code(), StatusCode::kCorrupt);
}

TEST(SampleGrouperTest, NonEmptyBadFieldDropsTheSample) {
  Grouped g = Group({{"a.jpg", "A"}, {"a.__bad__", "yes"}, {"b.jpg", "B"}, {"b.__bad__", ""}});
  ASSERT_TRUE(g.status.ok());
  ASSERT_EQ(g.samples.size(), 1u);
  EXPECT_EQ(g.samples[0].key, "b");
}

TEST(SampleGrouperTest, SameKeyInSeparateRunsGivesTwoSamples) {
  Grouped g = Group({{"k1.txt", "1"}, {"k2.txt", "2"}, {"k1.json", "3"}});
  ASSERT_TRUE(g.status.ok());
  ASSERT_EQ(g.samples.size(), 3u);
  EXPECT_EQ(g.samples[0].key, "k1");
  EXPECT_EQ(g.samples[2].key, "k1");
}

TEST(SampleGrouperTest, EmptyShardAndCallbackErrors) {
  Grouped g = Group({});
  EXPECT_TRUE(g.status.ok());
  EXPECT_TRUE(g.samples.empty());

  SampleGrouper grouper("s");
  auto fail = [](Sample&&) { return Cancelled("stop"); };
  ASSERT_TRUE(grouper.Add(Member("a.jpg", "A", 0), fail).ok());
  EXPECT_EQ(grouper.Add(Member("b.jpg", "B", 1024), fail).code(), StatusCode::kCancelled);
}

TEST(SampleGrouperTest, FieldsShareTheChunkStorage) {
  std::string tar = TarToString(std::vector<std::pair<std::string, std::string>>{{"a.jpg", "AAAA"}, {"a.cls", "1"}});
  Buffer chunk = Buffer::CopyOf(tar);
  TarParser parser("x.tar");
  SampleGrouper grouper("x.tar");
  std::vector<Sample> samples;
  auto on_sample = [&](Sample&& s) {
    samples.push_back(std::move(s));
    return Status::Ok();
  };
  ASSERT_TRUE(parser.Feed(chunk, [&](TarMember&& m) { return grouper.Add(std::move(m), on_sample); }).ok());
  ASSERT_TRUE(parser.Finish().ok());
  ASSERT_TRUE(grouper.Finish(on_sample).ok());
  ASSERT_EQ(samples.size(), 1u);
  const Buffer* jpg = samples[0].Find("jpg");
  ASSERT_NE(jpg, nullptr);
  EXPECT_GE(jpg->data(), chunk.data());
  EXPECT_LT(jpg->data(), chunk.data() + chunk.size());
}

}  // namespace
}  // namespace s3stream
