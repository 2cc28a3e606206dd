// s3stream._core: the native engine. The Python package (python/s3stream) wraps it; users never
// import _core directly.
#include "bindings.h"

NB_MODULE(_core, m) {
  m.doc() = "s3stream native core";
  s3stream::bindings::InitErrors(m);
  s3stream::bindings::InitBuffer(m);
  s3stream::bindings::InitClient(m);
  s3stream::bindings::InitIo(m);
  s3stream::bindings::InitPipeline(m);
}
