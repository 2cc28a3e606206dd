// s3stream._core.Reader / Writer: the native halves of s3stream.open(). Every call that can wait on
// the network releases the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>

#include "bindings.h"
#include "py_buffer.h"
#include "s3stream/object_reader.h"
#include "s3stream/object_writer.h"
#include "status_error.h"

namespace nb = nanobind;

namespace s3stream::bindings {
namespace {

// Options left at None keep the C++ defaults (ReaderOptions, WriterOptions): one place for them.
std::unique_ptr<ObjectReader> OpenReader(Client& client, const std::string& uri, std::optional<size_t> chunk_size,
                                         std::optional<int> prefetch_chunks) {
  ReaderOptions options;
  if (chunk_size) options.chunk_size = *chunk_size;
  if (prefetch_chunks) options.prefetch_chunks = *prefetch_chunks;
  nb::gil_scoped_release release;
  return Unwrap(client.OpenReader(uri, std::move(options)));
}

std::unique_ptr<ObjectWriter> OpenWriter(Client& client, const std::string& uri, std::optional<size_t> part_size,
                                         std::optional<int> max_inflight_parts) {
  WriterOptions options;
  if (part_size) options.part_size = *part_size;
  if (max_inflight_parts) options.max_inflight_parts = *max_inflight_parts;
  return Unwrap(client.OpenWriter(uri, options));
}

size_t ReadInto(ObjectReader& reader, nb::handle dest) {
  PyBufferView view(dest, /*writable=*/true);
  nb::gil_scoped_release release;
  return Unwrap(reader.Read(view.bytes()));
}

nb::bytes Read(ObjectReader& reader, int64_t n) {
  uint64_t left = reader.Tell() < reader.size() ? reader.size() - reader.Tell() : 0;
  size_t want = n < 0 ? left : std::min<uint64_t>(left, static_cast<uint64_t>(n));
  // Read straight into the bytes object's storage: one copy from the network buffer, not two.
  PyObject* bytes = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(want));
  if (!bytes) throw nb::python_error();
  nb::bytes result = nb::steal<nb::bytes>(bytes);
  Result<size_t> got = [&] {
    nb::gil_scoped_release release;
    return reader.Read({reinterpret_cast<uint8_t*>(PyBytes_AS_STRING(bytes)), want});
  }();
  size_t count = Unwrap(std::move(got));
  if (count != want) return nb::bytes(PyBytes_AS_STRING(bytes), count);
  return result;
}

Buffer ReadBuffer(ObjectReader& reader, size_t max_bytes) {
  nb::gil_scoped_release release;
  return Unwrap(reader.ReadBuffer(max_bytes));
}

size_t Write(ObjectWriter& writer, nb::handle data) {
  PyBufferView view(data, /*writable=*/false);
  nb::gil_scoped_release release;  // a full part may have to wait for an upload slot
  ThrowIfError(writer.Write(view.bytes()));
  return view.bytes().size();
}

}  // namespace

void InitIo(nb::module_& m) {
  nb::class_<ObjectReader>(m, "Reader")
      .def_prop_ro("size", &ObjectReader::size)
      .def_prop_ro("etag", [](const ObjectReader& r) { return r.info().etag; })
      .def("tell", &ObjectReader::Tell)
      .def("seek", &ObjectReader::Seek, nb::arg("position"))
      .def("readinto", &ReadInto, nb::arg("buffer"))
      .def("read", &Read, nb::arg("n") = -1)
      .def("read_buffer", &ReadBuffer, nb::arg("max_bytes"));

  nb::class_<ObjectWriter>(m, "Writer")
      .def_prop_ro("bytes_written", &ObjectWriter::bytes_written)
      .def("write", &Write, nb::arg("data"))
      .def("close", [](ObjectWriter& w) {
        nb::gil_scoped_release release;
        ThrowIfError(w.Close());
      })
      .def("abort", [](ObjectWriter& w) {
        nb::gil_scoped_release release;
        w.Abort();
      });

  m.def("open_reader", &OpenReader, nb::arg("client"), nb::arg("uri"), nb::arg("chunk_size") = nb::none(),
        nb::arg("prefetch_chunks") = nb::none());
  m.def("open_writer", &OpenWriter, nb::arg("client"), nb::arg("uri"), nb::arg("part_size") = nb::none(),
        nb::arg("max_inflight_parts") = nb::none());
}

}  // namespace s3stream::bindings
