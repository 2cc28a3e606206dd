// s3stream.Buffer: native bytes exposed through the buffer protocol, without copying. The Python
// object owns a reference to the storage, so memoryviews and torch.frombuffer tensors keep it alive.
// Writable, because torch.frombuffer warns on read-only buffers and a sample's bytes belong to
// the sample's consumer alone.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cerrno>
#include <system_error>

#include "bindings.h"
#include "s3stream/buffer.h"
#include "util/shared_arena.h"

namespace nb = nanobind;

namespace s3stream::bindings {
namespace {

int GetBuffer(PyObject* exporter, Py_buffer* view, int flags) {
  Buffer* self = nb::inst_ptr<Buffer>(exporter);
  return PyBuffer_FillInfo(view, exporter, self->data(), static_cast<Py_ssize_t>(self->size()), /*readonly=*/0, flags);
}

PyType_Slot kBufferSlots[] = {
    {Py_bf_getbuffer, reinterpret_cast<void*>(GetBuffer)},
    {0, nullptr},
};

}  // namespace

void InitBuffer(nb::module_& m) {
  m.def(
      "_enable_shared_arena",
      [](size_t capacity) {
        const int fd = internal::EnableSharedArena(capacity);
        if (fd < 0) throw std::system_error(errno, std::generic_category(), "s3stream: no shared arena");
        return fd;
      },
      nb::arg("capacity"),
      "Large Buffers of this process are allocated in a memfd another process can map; returns its "
      "file descriptor (see s3stream.transfer). Idempotent.");
  m.def("_shared_arena_used", &internal::SharedArenaUsed,
        "Bytes of this process's shared arena handed out so far (its memory high-water mark).");
  nb::class_<Buffer>(m, "Buffer", nb::type_slots(kBufferSlots),
                     "Bytes owned by native code, readable without copying: memoryview(buf), "
                     "numpy.frombuffer(buf, ...), torch.frombuffer(buf, dtype=torch.uint8).")
      .def("__init__",
           [](Buffer* self, nb::bytes data) {
             new (self) Buffer(Buffer::CopyOf(std::string_view(data.c_str(), data.size())));
           },
           nb::arg("data"), "A Buffer holding a copy of `data`.")
      .def_static(
          "view",
          [](nb::handle owner, size_t offset, size_t length) {
            // Zero-copy: a Buffer over [offset, offset+length) of any buffer-protocol object (a
            // shared-memory tensor arriving from a DataLoader worker); the view keeps it alive.
            auto* view = new Py_buffer();
            if (PyObject_GetBuffer(owner.ptr(), view, PyBUF_SIMPLE) != 0) {
              delete view;
              throw nb::python_error();
            }
            if (offset + length > static_cast<size_t>(view->len)) {
              PyBuffer_Release(view);
              delete view;
              throw nb::index_error("view outside the owner's memory");
            }
            auto* base = static_cast<uint8_t*>(view->buf) + offset;
            return Buffer::Wrap(base, length, [view] {
              nb::gil_scoped_acquire gil;  // the last reference may drop on a native thread
              PyBuffer_Release(view);
              delete view;
            });
          },
          nb::arg("owner"), nb::arg("offset"), nb::arg("length"),
          "A Buffer sharing [offset, offset+length) of `owner`'s memory (kept alive).")
      // Pickles as a copy of its bytes (DataLoader workers send samples to the main process).
      .def("__reduce__", [](nb::handle self) {
        const Buffer& b = nb::cast<const Buffer&>(self);
        return nb::make_tuple(self.type(),
                              nb::make_tuple(nb::bytes(reinterpret_cast<const char*>(b.data()), b.size())));
      })
      .def("_arena_offset", [](const Buffer& b) { return internal::SharedArenaOffset(b.data()); },
           "Where the bytes start in this process's shared arena (s3stream.transfer), or -1.")
      .def("__len__", &Buffer::size)
      .def("__bytes__", [](const Buffer& b) { return nb::bytes(reinterpret_cast<const char*>(b.data()), b.size()); })
      .def("tobytes", [](const Buffer& b) { return nb::bytes(reinterpret_cast<const char*>(b.data()), b.size()); },
           "A copy as bytes.")
      .def("__repr__", [](const Buffer& b) { return "<s3stream.Buffer " + std::to_string(b.size()) + " bytes>"; });
}

}  // namespace s3stream::bindings
