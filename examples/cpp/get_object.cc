// A small program using the s3stream core from C++ alone: streams an object to stdout with the
// prefetching reader. Configuration comes from the usual AWS environment variables.
//
//   AWS_ENDPOINT_URL=http://127.0.0.1:9000 s3stream_example s3://bucket/key > copy
#include <cstdio>
#include <vector>

#include "s3stream/client.h"
#include "s3stream/object_reader.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s s3://bucket/key | file:///path\n", argv[0]);
    return 2;
  }
  auto fail = [](const s3stream::Status& status) {
    std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
    return 1;
  };
  auto client = s3stream::Client::Create({});
  if (!client.ok()) return fail(client.status());
  auto reader = (*client)->OpenReader(argv[1]);
  if (!reader.ok()) return fail(reader.status());

  std::vector<uint8_t> chunk(1 << 20);
  for (;;) {
    auto n = (*reader)->Read(chunk);
    if (!n.ok()) return fail(n.status());
    if (*n == 0) break;
    std::fwrite(chunk.data(), 1, *n, stdout);
  }
  return 0;
}
