#include "format/gzip_stream.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <random>

#include "s3stream/tar.h"

namespace s3stream::internal {
namespace {

std::string RandomText(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>('a' + rng() % 6);  // compressible, not trivially
  return s;
}

// One gzip member, as `gzip` writes it.
std::string Gzip(std::string_view data) {
  z_stream s{};
  EXPECT_EQ(deflateInit2(&s, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&s, data.size()) + 64, '\0');
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  s.avail_in = static_cast<uInt>(data.size());
  s.next_out = reinterpret_cast<Bytef*>(out.data());
  s.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&s, Z_FINISH), Z_STREAM_END);
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

struct Inflated {
  Status status;
  std::string data;
  std::vector<Buffer> pieces;
};

Inflated Inflate(std::string_view gz, size_t chunk, size_t block_size = 1 << 20) {
  Inflated out;
  GzipInflater inflater("s3://b/x.tar.gz", block_size);
  auto on_output = [&](Buffer b) {
    out.pieces.push_back(b);
    return Status::Ok();
  };
  for (size_t pos = 0; pos < gz.size(); pos += chunk) {
    Buffer piece = Buffer::CopyOf(gz.substr(pos, chunk));
    out.status = inflater.Feed(piece.span(), on_output);
    if (!out.status.ok()) return out;
  }
  out.status = inflater.Finish();
  // Joined only now: an earlier piece must not have been overwritten by later output.
  for (const Buffer& b : out.pieces) out.data += b.view();
  return out;
}

const std::vector<size_t> kChunks = {1, 7, 511, 4096, 1 << 20};

TEST(GzipInflaterTest, RoundTripAtEveryChunkSize) {
  std::string data = RandomText(300000, 1);
  std::string gz = Gzip(data);
  for (size_t chunk : kChunks) {
    for (size_t block : {size_t{1}, size_t{1000}, size_t{1} << 20}) {
      if (chunk == 1 && block == 1) continue;  // 600k callbacks: slow under ASan, nothing new
      SCOPED_TRACE("chunk " + std::to_string(chunk) + " block " + std::to_string(block));
      Inflated r = Inflate(gz, chunk, block);
      ASSERT_TRUE(r.status.ok()) << r.status.ToString();
      EXPECT_EQ(r.data, data);
    }
  }
}

TEST(GzipInflaterTest, ConcatenatedMembersAreOneStream) {
  std::string a = RandomText(5000, 2), b = RandomText(70000, 3), c = "";
  std::string gz = Gzip(a) + Gzip(b) + Gzip(c) + Gzip("tail");
  for (size_t chunk : kChunks) {
    Inflated r = Inflate(gz, chunk);
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(r.data, a + b + c + "tail");
  }
}

TEST(GzipInflaterTest, TrailingZerosAreIgnoredTrailingGarbageIsNot) {
  std::string gz = Gzip("hello");
  Inflated r = Inflate(gz + std::string(1000, '\0'), 100);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.data, "hello");

  r = Inflate(gz + std::string(10, '\0') + "junk", 100);
  EXPECT_EQ(r.status.code(), StatusCode::kCorrupt);
  EXPECT_NE(r.status.message().find("trailing garbage"), std::string::npos) << r.status.message();
  EXPECT_NE(r.status.message().find("offset " + std::to_string(gz.size() + 10)), std::string::npos)
      << r.status.message();

  r = Inflate(gz + "junk", 100);
  EXPECT_EQ(r.status.code(), StatusCode::kCorrupt);
  EXPECT_NE(r.status.message().find("s3://b/x.tar.gz"), std::string::npos) << r.status.message();
}

TEST(GzipInflaterTest, CorruptDataNamesSourceAndCompressedOffset) {
  std::string data = RandomText(100000, 4);
  std::string gz = Gzip(data);
  gz[gz.size() / 2] ^= 0x55;
  for (size_t chunk : kChunks) {
    Inflated r = Inflate(gz, chunk);
    ASSERT_EQ(r.status.code(), StatusCode::kCorrupt);
    EXPECT_NE(r.status.message().find("s3://b/x.tar.gz: corrupt gzip data at compressed offset "),
              std::string::npos)
        << r.status.message();
  }
}

TEST(GzipInflaterTest, BadChecksumInTrailer) {
  std::string gz = Gzip("some data");
  gz[gz.size() - 6] ^= 1;  // CRC-32
  Inflated r = Inflate(gz, 3);
  EXPECT_EQ(r.status.code(), StatusCode::kCorrupt);
  EXPECT_NE(r.status.message().find("incorrect data check"), std::string::npos) << r.status.message();
}

TEST(GzipInflaterTest, Truncated) {
  std::string gz = Gzip(RandomText(50000, 5));
  for (size_t cut : {size_t{1}, size_t{5}, gz.size() / 2, gz.size() - 1}) {
    Inflated r = Inflate(std::string_view(gz).substr(0, cut), 1000);
    ASSERT_EQ(r.status.code(), StatusCode::kCorrupt) << cut;
    EXPECT_NE(r.status.message().find("truncated gzip stream"), std::string::npos) << r.status.message();
    EXPECT_NE(r.status.message().find("offset " + std::to_string(cut)), std::string::npos) << r.status.message();
  }
}

TEST(GzipInflaterTest, NotGzipAndEmpty) {
  Inflated r = Inflate(TarToString(std::vector<std::pair<std::string, std::string>>{{"a", "b"}}), 512);
  EXPECT_EQ(r.status.code(), StatusCode::kCorrupt);
  EXPECT_NE(r.status.message().find("s3://b/x.tar.gz is not gzip data"), std::string::npos) << r.status.message();
  r = Inflate("", 512);
  EXPECT_EQ(r.status.code(), StatusCode::kCorrupt);
  EXPECT_NE(r.status.message().find("empty"), std::string::npos) << r.status.message();
}

TEST(GzipInflaterTest, CallbackErrorStops) {
  GzipInflater inflater("x.gz");
  std::string gz = Gzip("abc");
  auto fail = [](Buffer) { return Cancelled("stop"); };
  EXPECT_EQ(inflater.Feed({reinterpret_cast<const uint8_t*>(gz.data()), gz.size()}, fail).code(),
            StatusCode::kCancelled);
  EXPECT_EQ(inflater.Finish().code(), StatusCode::kCancelled);
}

TEST(GzipInflaterTest, TarThroughGzipKeepsGzippedMembersAsBytes) {
  std::string inner = Gzip("{\"a\": 1}");  // a member that is itself gzip: stays compressed
  std::vector<std::pair<std::string, std::string>> members = {{"x.json.gz", inner}, {"x.txt", RandomText(3000, 6)}};
  std::string gz = Gzip(TarToString(members));
  for (size_t chunk : kChunks) {
    TarParser parser("s3://b/x.tgz");
    GzipInflater inflater("s3://b/x.tgz", 1000);
    std::vector<TarMember> got;
    auto on_member = [&](TarMember&& m) {
      got.push_back(std::move(m));
      return Status::Ok();
    };
    for (size_t pos = 0; pos < gz.size(); pos += chunk) {
      std::string_view piece = std::string_view(gz).substr(pos, chunk);
      ASSERT_TRUE(inflater.Feed({reinterpret_cast<const uint8_t*>(piece.data()), piece.size()},
                                [&](Buffer b) { return parser.Feed(b, on_member); })
                      .ok());
    }
    ASSERT_TRUE(inflater.Finish().ok());
    ASSERT_TRUE(parser.Finish().ok());
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].data.view(), inner);
    EXPECT_EQ(got[1].data.view(), members[1].second);
    EXPECT_GT(inflater.decompressed_offset(), inflater.compressed_offset());
  }
}

TEST(GzipInflaterTest, Names) {
  EXPECT_TRUE(IsGzipShardName("s3://b/a.tar.gz"));
  EXPECT_TRUE(IsGzipShardName("a.TGZ"));
  EXPECT_FALSE(IsGzipShardName("a.tar"));
  EXPECT_FALSE(IsGzipShardName("a.json.gz"));
  std::string gz = Gzip("x");
  EXPECT_TRUE(HasGzipMagic({reinterpret_cast<const uint8_t*>(gz.data()), gz.size()}));
  EXPECT_FALSE(HasGzipMagic({reinterpret_cast<const uint8_t*>("ab"), 2}));
}

}  // namespace
}  // namespace s3stream::internal
