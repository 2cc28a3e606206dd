#include "s3stream/tar.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace s3stream {
namespace {

namespace fs = std::filesystem;
using Members = std::vector<std::pair<std::string, std::string>>;

const std::vector<size_t> kChunkSizes = {1, 511, 512, 513, 64 << 10, SIZE_MAX};

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const fs::path& path, std::string_view bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("s3stream_tar_test_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct Parsed {
  Status status;
  std::vector<TarMember> members;
};

// Feeds `archive` in pieces of `chunk` bytes, each in its own storage (so reading past a chunk is an
// ASan error, and members crossing chunks must be assembled).
Parsed Parse(std::string_view archive, size_t chunk = SIZE_MAX, uint64_t start_offset = 0,
             const std::string& source = "s3://b/x.tar") {
  Parsed out;
  TarParser parser(source, start_offset);
  auto on_member = [&](TarMember&& m) {
    out.members.push_back(std::move(m));
    return Status::Ok();
  };
  for (size_t pos = 0; pos < archive.size(); pos += chunk) {
    out.status = parser.Feed(Buffer::CopyOf(archive.substr(pos, chunk)), on_member);
    if (!out.status.ok()) return out;
    if (archive.size() - pos <= chunk) break;
  }
  out.status = parser.Finish();
  return out;
}

// Checks the parse of `archive` gives `expected` (names and bytes) at every chunk size, and that
// the offsets point at the data in the archive.
void ExpectMembers(const std::string& archive, const Members& expected) {
  for (size_t chunk : kChunkSizes) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    Parsed p = Parse(archive, chunk);
    ASSERT_TRUE(p.status.ok()) << p.status.ToString();
    ASSERT_EQ(p.members.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      const TarMember& m = p.members[i];
      EXPECT_EQ(m.name, expected[i].first);
      EXPECT_EQ(m.data.view(), expected[i].second) << m.name;
      EXPECT_EQ(m.size, expected[i].second.size());
      EXPECT_EQ(archive.substr(m.data_offset, m.size), expected[i].second);
      EXPECT_EQ(m.header_offset % kTarBlockSize, 0u);
      EXPECT_LT(m.header_offset, m.data_offset);
    }
  }
}

// Edits a header in place and recomputes its checksum.
void SetField(std::string& archive, size_t header, size_t field, std::string_view bytes) {
  std::memcpy(archive.data() + header + field, bytes.data(), bytes.size());
  std::memset(archive.data() + header + 148, ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < kTarBlockSize; ++i) sum += static_cast<unsigned char>(archive[header + i]);
  char buf[8];
  std::snprintf(buf, sizeof buf, "%06o", sum);
  std::memcpy(archive.data() + header + 148, buf, 7);
}

// One raw header block: name, octal size, type, with a valid checksum. For the cases TarWriter
// never writes.
std::string Header(std::string_view name, uint64_t size, char type) {
  std::string h(kTarBlockSize, '\0');
  std::memcpy(h.data(), name.data(), std::min<size_t>(name.size(), 100));
  char buf[16];
  std::snprintf(buf, sizeof buf, "%011llo", static_cast<unsigned long long>(size));
  std::memcpy(h.data() + 124, buf, 11);
  h[156] = type;
  std::memcpy(h.data() + 257, "ustar\0" "00", 8);
  SetField(h, 0, 100, "0000644");
  return h;
}

std::string Padded(std::string data) {
  data.resize((data.size() + kTarBlockSize - 1) / kTarBlockSize * kTarBlockSize, '\0');
  return data;
}

std::string EndBlocks() { return std::string(2 * kTarBlockSize, '\0'); }

// ---------------------------------------------------------------------------------------------
// Archives made by GNU tar.

struct TarFixture {
  TempDir dir;
  Members files;  // regular files in the order given to tar
  fs::path src() const { return dir.path() / "src"; }

  void Add(const std::string& name, const std::string& data) {
    WriteFile(src() / name, data);
    files.emplace_back(name, data);
  }
  // Runs GNU tar with `format` on `names` (relative to src) and returns the archive.
  std::string Tar(const std::string& format, const std::vector<std::string>& names) const {
    fs::path out = dir.path() / ("out-" + format + ".tar");
    std::string cmd = "cd " + Quote(src().string()) + " && tar --format=" + format + " -cf " + Quote(out.string());
    for (const auto& n : names) cmd += " " + Quote(n);
    cmd += " 2>" + Quote((dir.path() / "tar.err").string());
    int rc = std::system(cmd.c_str());
    EXPECT_EQ(rc, 0) << cmd << "\n" << ReadFile(dir.path() / "tar.err");
    return ReadFile(out);
  }
};

TEST(TarParserGnuTarTest, AllFormatsWithLongAndUnicodeNames) {
  TarFixture f;
  const std::string n99 = std::string(95, 'x') + ".txt";
  const std::string n150 = std::string(60, 'p') + "/" + std::string(85, 'q') + ".txt";  // ustar prefix
  const std::string n120 = std::string(116, 'r') + ".txt";                              // fits no ustar field
  const std::string n300 = std::string(100, 's') + "/" + std::string(100, 't') + "/" + std::string(90, 'u') + ".bin";
  const std::string unicode = "ünïcødé/日本語.txt";
  f.Add("short.txt", "hello");
  f.Add("empty.bin", "");
  f.Add("block.bin", RandomBytes(512, 1));
  f.Add("block1.bin", RandomBytes(513, 2));
  f.Add("big.bin", RandomBytes(100000, 3));
  f.Add("dir/sub/file.json", "{\"a\": 1}");
  f.Add(n99, "n99");
  f.Add(unicode, "unicode");
  fs::create_directories(f.src() / "emptydir");
  fs::create_symlink("short.txt", f.src() / "link.txt");
  fs::create_hard_link(f.src() / "big.bin", f.src() / "hard.bin");
  std::vector<std::string> names;
  for (const auto& [name, data] : f.files) names.push_back(name);
  names.insert(names.begin() + 2, "emptydir");
  names.push_back("link.txt");
  names.push_back("hard.bin");  // a hard link to big.bin: type '1', skipped like tarfile does

  Members v7_files = f.files;
  SCOPED_TRACE("v7");
  ExpectMembers(f.Tar("v7", names), v7_files);

  f.Add(n150, "n150");
  names.insert(names.end() - 2, n150);
  SCOPED_TRACE("ustar");
  ExpectMembers(f.Tar("ustar", names), f.files);

  f.Add(n120, "n120");
  f.Add(n300, RandomBytes(1000, 4));
  names.insert(names.end() - 2, n120);
  names.insert(names.end() - 2, n300);
  for (const std::string format : {"gnu", "oldgnu", "pax", "posix"}) {
    SCOPED_TRACE(format);
    ExpectMembers(f.Tar(format, names), f.files);
  }
}

TEST(TarParserGnuTarTest, StartAtAnyMemberOffset) {
  TarFixture f;
  f.Add(std::string(120, 'a') + ".jpg", RandomBytes(700, 5));  // pax header before it
  f.Add("b.jpg", RandomBytes(512, 6));
  f.Add(std::string(200, 'c') + ".jpg", RandomBytes(10, 7));
  f.Add("d.jpg", "");
  std::vector<std::string> names;
  for (const auto& [name, data] : f.files) names.push_back(name);
  for (const std::string format : {"pax", "gnu"}) {
    SCOPED_TRACE(format);
    std::string archive = f.Tar(format, names);
    Parsed all = Parse(archive);
    ASSERT_TRUE(all.status.ok()) << all.status.ToString();
    ASSERT_EQ(all.members.size(), 4u);
    for (size_t i = 0; i < all.members.size(); ++i) {
      uint64_t start = all.members[i].header_offset;
      for (size_t chunk : {size_t{1}, size_t{513}, SIZE_MAX}) {
        Parsed tail = Parse(std::string_view(archive).substr(start), chunk, start);
        ASSERT_TRUE(tail.status.ok()) << tail.status.ToString();
        ASSERT_EQ(tail.members.size(), 4 - i);
        EXPECT_EQ(tail.members[0].name, all.members[i].name);
        EXPECT_EQ(tail.members[0].header_offset, start);
        EXPECT_EQ(tail.members[0].data_offset, all.members[i].data_offset);
        EXPECT_EQ(tail.members[0].data.view(), all.members[i].data.view());
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Zero copy and chunking.

TEST(TarParserTest, MembersInsideAChunkAreSlicesOfIt) {
  std::string archive = TarToString(Members{{"a.bin", RandomBytes(3000, 8)}, {"b.bin", "bb"}});
  Buffer chunk = Buffer::CopyOf(archive);
  TarParser parser("x.tar");
  std::vector<TarMember> members;
  ASSERT_TRUE(parser.Feed(chunk, [&](TarMember&& m) {
    members.push_back(std::move(m));
    return Status::Ok();
  }).ok());
  ASSERT_TRUE(parser.Finish().ok());
  ASSERT_EQ(members.size(), 2u);
  for (const auto& m : members) {
    EXPECT_EQ(m.data.data(), chunk.data() + m.data_offset) << m.name;
  }
  EXPECT_TRUE(parser.at_end());
  EXPECT_EQ(parser.offset(), 512u + 3072u + 512u + 512u + 512u);  // stops at the first zero block
}

TEST(TarParserTest, ArchiveWithoutEndBlocksAndLoneZeroBlockAndTrailingGarbage) {
  std::string body = TarToString(Members{{"a.txt", "A"}});
  body.resize(body.size() - 2 * kTarBlockSize);
  ExpectMembers(body, {{"a.txt", "A"}});                                  // no end blocks
  ExpectMembers(body + std::string(512, '\0'), {{"a.txt", "A"}});         // one zero block
  ExpectMembers(body + std::string(512, '\0') + RandomBytes(777, 9), {{"a.txt", "A"}});  // garbage after
  // As GNU tar and tarfile do, a member after a lone zero block is not read.
  ExpectMembers(body + std::string(512, '\0') + TarToString(Members{{"b.txt", "B"}}), {{"a.txt", "A"}});
}

TEST(TarParserTest, EmptyArchive) {
  ExpectMembers(EndBlocks(), {});
}

TEST(TarParserTest, EmptyInputIsNotATar) {
  Parsed p = Parse("");
  EXPECT_EQ(p.status.code(), StatusCode::kCorrupt);
  EXPECT_NE(p.status.message().find("s3://b/x.tar is empty"), std::string::npos) << p.status.message();
}

// ---------------------------------------------------------------------------------------------
// Header variants.

TEST(TarParserTest, Base256Size) {
  std::string data = RandomBytes(700, 10);
  std::string archive = TarToString(Members{{"big.bin", data}});
  std::string field(12, '\0');
  field[0] = static_cast<char>(0x80);
  field[10] = static_cast<char>(700 >> 8);
  field[11] = static_cast<char>(700 & 0xff);
  SetField(archive, 0, 124, field);
  ExpectMembers(archive, {{"big.bin", data}});

  field[0] = static_cast<char>(0xff);  // negative
  SetField(archive, 0, 124, field);
  Parsed p = Parse(archive);
  EXPECT_EQ(p.status.code(), StatusCode::kCorrupt);
  EXPECT_NE(p.status.message().find("size"), std::string::npos) << p.status.message();
}

TEST(TarParserTest, PaxSizeAndPathOverrideTheHeader) {
  std::string records = "10 size=5\n" "18 path=real.name\n";
  std::string archive = Header("pax", records.size(), 'x') + Padded(records) + Header("short", 0, '0') +
                        Padded("12345") + EndBlocks();
  ExpectMembers(archive, {{"real.name", "12345"}});
  EXPECT_EQ(Parse(archive).members[0].header_offset, 0u);
  EXPECT_EQ(Parse(archive).members[0].data_offset, 1536u);
}

TEST(TarParserTest, PaxGlobalHeaderAppliesToLaterMembersUntilUnset) {
  std::string global = "18 path=glob.name\n";
  std::string unset = "8 path=\n";
  std::string archive = Header("g", global.size(), 'g') + Padded(global) + Header("a", 1, '0') + Padded("A") +
                        Header("b", 1, '0') + Padded("B") + Header("g2", unset.size(), 'g') + Padded(unset) +
                        Header("c", 1, '0') + Padded("C") + EndBlocks();
  ExpectMembers(archive, {{"glob.name", "A"}, {"glob.name", "B"}, {"c", "C"}});
  // A global header does not move a member's header_offset: it applies to all later members.
  EXPECT_EQ(Parse(archive).members[0].header_offset, 1024u);
}

TEST(TarParserTest, FirstLongNameWinsLikeTarfile) {
  std::string pax = "15 path=second\n";
  std::string archive = Header("././@LongLink", 6, 'L') + Padded(std::string("first\0", 6)) +
                        Header("pax", pax.size(), 'x') + Padded(pax) + Header("header", 1, '0') + Padded("1") +
                        Header("pax", pax.size(), 'x') + Padded(pax) + Header("././@LongLink", 5, 'L') +
                        Padded("third") + Header("header", 1, '0') + Padded("2") +
                        Header("././@LongLink", 4, 'K') + Padded("targ") + Header("lnk", 0, '2') +
                        Header("plain", 1, '0') + Padded("3") + EndBlocks();
  ExpectMembers(archive, {{"first", "1"}, {"second", "2"}, {"plain", "3"}});
}

TEST(TarParserTest, NonRegularMembersAreSkippedWithTheirData) {
  std::string archive = Header("dir/", 0, '5') + Header("v7dir/", 0, '\0') + Header("sym", 0, '2') +
                        Header("hard", 0, '1') + Header("fifo", 0, '6') + Header("vol", 10, 'V') +
                        Padded("0123456789") + Header("contig", 2, '7') + Padded("cc") + Header("old", 1, '\0') +
                        Padded("o") + EndBlocks();
  ExpectMembers(archive, {{"contig", "cc"}, {"old", "o"}});
}

TEST(TarParserTest, LinkSizeFieldIsIgnoredLikeTarfile) {
  // tarfile (and so webdataset) reads no data after a symlink header whatever its size says.
  std::string archive = Header("sym", 512, '2') + Header("a", 1, '0') + Padded("A") + EndBlocks();
  ExpectMembers(archive, {{"a", "A"}});
}

TEST(TarParserTest, UstarPrefixOnlyForPosixMagic) {
  std::string archive = TarToString(Members{{std::string(60, 'p') + "/" + std::string(80, 'q'), "x"}});
  ExpectMembers(archive, {{std::string(60, 'p') + "/" + std::string(80, 'q'), "x"}});
  SetField(archive, 0, 257, std::string_view("ustar  \0", 8));  // old GNU: bytes 345.. are not a prefix
  ExpectMembers(archive, {{std::string(80, 'q'), "x"}});
}

TEST(TarParserTest, SignedChecksumIsAccepted) {
  std::string name = "\xff\xfe.bin";
  std::string archive = Header(name, 1, '0') + Padded("x") + EndBlocks();
  int sum = 0;
  std::memset(archive.data() + 148, ' ', 8);
  for (size_t i = 0; i < kTarBlockSize; ++i) sum += static_cast<signed char>(archive[i]);
  char buf[8];
  std::snprintf(buf, sizeof buf, "%06o", sum);
  std::memcpy(archive.data() + 148, buf, 7);
  ExpectMembers(archive, {{name, "x"}});
}

TEST(TarParserTest, SparseMembersAreRefused) {
  Parsed p = Parse(Header("s", 0, 'S') + EndBlocks());
  EXPECT_EQ(p.status.code(), StatusCode::kCorrupt);
  EXPECT_NE(p.status.message().find("sparse"), std::string::npos);
  std::string pax = "22 GNU.sparse.major=1\n";
  p = Parse(Header("pax", pax.size(), 'x') + Padded(pax) + Header("s", 0, '0') + EndBlocks());
  EXPECT_EQ(p.status.code(), StatusCode::kCorrupt);
  EXPECT_NE(p.status.message().find("sparse"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Errors: kCorrupt naming the source and the offset.

void ExpectCorrupt(const std::string& archive, const std::vector<std::string>& fragments,
                   size_t members_before = SIZE_MAX) {
  for (size_t chunk : kChunkSizes) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    Parsed p = Parse(archive, chunk);
    ASSERT_EQ(p.status.code(), StatusCode::kCorrupt) << p.status.ToString();
    for (const auto& f : fragments) EXPECT_NE(p.status.message().find(f), std::string::npos) << p.status.message();
    if (members_before != SIZE_MAX) EXPECT_EQ(p.members.size(), members_before);
  }
}

TEST(TarParserErrorTest, TruncatedMidData) {
  std::string archive = TarToString(Members{{"a.txt", std::string(1000, 'a')}});
  ExpectCorrupt(archive.substr(0, 612),
                {"s3://b/x.tar", "offset 0", "truncated member \"a.txt\"", "expected 1000 bytes, got 100"}, 0);
}

TEST(TarParserErrorTest, TruncatedMidHeader) {
  std::string archive = TarToString(Members{{"a.txt", std::string(1000, 'a')}, {"b.txt", "b"}});
  ExpectCorrupt(archive.substr(0, 1536 + 200), {"s3://b/x.tar", "offset 1536", "header", "got 200"}, 1);
}

TEST(TarParserErrorTest, TruncatedMidPadding) {
  std::string archive = TarToString(Members{{"a.txt", std::string(1000, 'a')}});
  ExpectCorrupt(archive.substr(0, 1520), {"offset 0", "padding", "\"a.txt\""}, 1);
}

TEST(TarParserErrorTest, TruncatedSkippedMember) {
  std::string archive = Header("vol", 1000, 'V') + std::string(10, 'v');
  ExpectCorrupt(archive, {"offset 0", "truncated member \"vol\"", "expected 1000 bytes, got 10"});
}

TEST(TarParserErrorTest, TruncatedAfterExtensionHeader) {
  std::string pax = "12 path=abc\n";
  ExpectCorrupt(Header("pax", pax.size(), 'x') + Padded(pax), {"offset 0", "extension header"});
  ExpectCorrupt(Header("pax", pax.size(), 'x') + pax.substr(0, 5), {"offset 0", "expected 12 bytes, got 5"});
  ExpectCorrupt(Header("pax", pax.size(), 'x') + Padded(pax) + EndBlocks(), {"offset 0", "end of the archive"});
}

TEST(TarParserErrorTest, BadChecksum) {
  std::string archive = TarToString(Members{{"a.txt", "a"}, {"b.txt", "b"}});
  archive[1024 + 3] ^= 0x20;  // a name byte of the second header
  ExpectCorrupt(archive, {"s3://b/x.tar", "offset 1024", "checksum"}, 1);
}

TEST(TarParserErrorTest, BadOctalSize) {
  std::string archive = TarToString(Members{{"a.txt", "a"}});
  SetField(archive, 0, 124, "0000000009x");
  ExpectCorrupt(archive, {"offset 0", "size", "bad octal field \"0000000009x\""});
}

TEST(TarParserErrorTest, MalformedPaxRecords) {
  for (std::string pax : {"abc path=foo\n", "99 path=foo\n", "12 path=fooX", "8 nokey\n", "5 =x\n"}) {
    SCOPED_TRACE(pax);
    ExpectCorrupt(Header("pax", pax.size(), 'x') + Padded(pax) + Header("a", 0, '0') + EndBlocks(),
                  {"s3://b/x.tar", "offset 0", "pax header malformed"});
  }
  std::string size = "13 size=12ab\n";
  ExpectCorrupt(Header("pax", size.size(), 'x') + Padded(size) + Header("a", 0, '0') + EndBlocks(),
                {"size=12ab", "not a decimal"});
}

TEST(TarParserErrorTest, HugeExtensionHeader) {
  ExpectCorrupt(Header("././@LongLink", uint64_t{1} << 32, 'L'), {"offset 0", "too large"});
}

TEST(TarParserErrorTest, NotATar) {
  ExpectCorrupt(RandomBytes(4096, 11), {"s3://b/x.tar is not a tar archive (no valid header at offset 0"});
  ExpectCorrupt(RandomBytes(100, 12), {"s3://b/x.tar is not a tar archive", "only 100 bytes"});
  std::string jpeg = std::string("\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01", 13) + RandomBytes(5000, 13);
  ExpectCorrupt(jpeg, {"s3://b/x.tar is not a tar archive (no valid header at offset 0)"});
  std::string gz = std::string("\x1f\x8b\x08\x00", 4) + RandomBytes(2000, 14);
  ExpectCorrupt(gz, {"not a tar archive", "gzip-compressed"});
}

TEST(TarParserErrorTest, StartOffsetNotAtAHeader) {
  std::string archive = TarToString(Members{{"a.txt", RandomBytes(2000, 15)}});
  Parsed p = Parse(std::string_view(archive).substr(1024), SIZE_MAX, 1024);
  EXPECT_EQ(p.status.code(), StatusCode::kCorrupt);
  EXPECT_NE(p.status.message().find("offset 1024"), std::string::npos) << p.status.message();
  EXPECT_NE(p.status.message().find("where reading started"), std::string::npos) << p.status.message();
}

TEST(TarParserErrorTest, CallbackErrorStopsAndSticks) {
  std::string archive = TarToString(Members{{"a.txt", "a"}, {"b.txt", "b"}});
  TarParser parser("x.tar");
  int calls = 0;
  auto fail = [&](TarMember&&) {
    ++calls;
    return Cancelled("enough");
  };
  EXPECT_EQ(parser.Feed(Buffer::CopyOf(archive), fail).code(), StatusCode::kCancelled);
  EXPECT_EQ(parser.Feed(Buffer::CopyOf(archive), fail).code(), StatusCode::kCancelled);
  EXPECT_EQ(parser.Finish().code(), StatusCode::kCancelled);
  EXPECT_EQ(calls, 1);
}

// ---------------------------------------------------------------------------------------------
// TarWriter.

Members WriterCases() {
  return {
      {"a.jpg", "jpeg"},
      {"empty", ""},
      {"block", RandomBytes(512, 20)},
      {"block1", RandomBytes(513, 21)},
      {"big", RandomBytes(100000, 22)},
      {std::string(100, 'n'), "exactly 100"},
      {std::string(60, 'p') + "/" + std::string(90, 'q'), "ustar prefix"},
      {std::string(120, 'r'), "pax: no slash"},
      {std::string(100, 's') + "/" + std::string(100, 't') + "/" + std::string(90, 'u') + ".bin", "pax: 300"},
      {"ünïcødé/日本語.txt", "pax: utf-8"},
      {"dir/with space/and'quote.txt", "odd characters"},
  };
}

TEST(TarWriterTest, RoundTripThroughTarParser) {
  Members cases = WriterCases();
  ExpectMembers(TarToString(cases), cases);
}

TEST(TarWriterTest, GnuTarListsAndExtractsTheSameFiles) {
  TempDir dir;
  Members cases = WriterCases();
  fs::path archive = dir.path() / "w.tar";
  WriteFile(archive, TarToString(cases));
  fs::path listing = dir.path() / "list.txt";
  std::string cmd = "tar --quoting-style=literal -tf " + Quote(archive.string()) + " > " + Quote(listing.string());
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::string expected;
  for (const auto& [name, data] : cases) expected += name + "\n";
  EXPECT_EQ(ReadFile(listing), expected);

  cmd = "tar -tvf " + Quote(archive.string()) + " > " + Quote(listing.string());
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::istringstream verbose(ReadFile(listing));
  std::string line;
  while (std::getline(verbose, line)) EXPECT_EQ(line.rfind("-rw-r--r-- 0/0", 0), 0u) << line;

  fs::path out = dir.path() / "x";
  fs::create_directories(out);
  cmd = "tar -xf " + Quote(archive.string()) + " -C " + Quote(out.string());
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  for (const auto& [name, data] : cases) EXPECT_EQ(ReadFile(out / name), data) << name;
}

TEST(TarWriterTest, DeterministicAndMemberBytesIsExact) {
  Members cases = WriterCases();
  EXPECT_EQ(TarToString(cases), TarToString(cases));
  std::string out;
  TarWriter writer([&](std::span<const uint8_t> b) {
    out.append(reinterpret_cast<const char*>(b.data()), b.size());
    return Status::Ok();
  });
  for (const auto& [name, data] : cases) {
    uint64_t before = writer.bytes_written();
    ASSERT_TRUE(writer.Add(name, data).ok());
    EXPECT_EQ(writer.bytes_written() - before, TarWriter::MemberBytes(name, data.size())) << name;
  }
  ASSERT_TRUE(writer.Finish().ok());
  EXPECT_EQ(out.size(), writer.bytes_written());
  EXPECT_EQ(out.size() % kTarBlockSize, 0u);
  // Sizes past 8 GiB get a pax size record.
  EXPECT_EQ(TarWriter::MemberBytes("a", uint64_t{1} << 34), 512u + 512u + 512u + (uint64_t{1} << 34));
}

TEST(TarWriterTest, RejectsBadNamesAndAddAfterFinishAndReportsSinkErrors) {
  std::string out;
  TarWriter writer([&](std::span<const uint8_t> b) {
    out.append(reinterpret_cast<const char*>(b.data()), b.size());
    return Status::Ok();
  });
  EXPECT_EQ(writer.Add("", "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(writer.Add(std::string("a\0b", 3), "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(writer.Add("dir/", "x").code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(out.empty());
  ASSERT_TRUE(writer.Finish().ok());
  EXPECT_EQ(writer.Add("a", "x").code(), StatusCode::kInvalidArgument);

  TarWriter failing([](std::span<const uint8_t>) { return Unavailable("disk full"); });
  EXPECT_EQ(failing.Add("a", "x").code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace s3stream
