// s3stream.Buffer: native bytes exposed through the buffer protocol, without copying. The Python
// object owns a reference to the storage, so memoryviews and torch.frombuffer tensors keep it alive.
// Writable, because torch.frombuffer warns on read-only buffers and a sample's bytes belong to
// the sample's consumer alone.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "bindings.h"
#include "s3stream/buffer.h"

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
  nb::class_<Buffer>(m, "Buffer", nb::type_slots(kBufferSlots),
                     "Bytes owned by native code, readable without copying: memoryview(buf), "
                     "numpy.frombuffer(buf, ...), torch.frombuffer(buf, dtype=torch.uint8).")
      .def("__init__",
           [](Buffer* self, nb::bytes data) {
             new (self) Buffer(Buffer::CopyOf(std::string_view(data.c_str(), data.size())));
           },
           nb::arg("data"), "A Buffer holding a copy of `data`.")
      // Pickles as a copy of its bytes (DataLoader workers send samples to the main process).
      .def("__reduce__", [](nb::handle self) {
        const Buffer& b = nb::cast<const Buffer&>(self);
        return nb::make_tuple(self.type(),
                              nb::make_tuple(nb::bytes(reinterpret_cast<const char*>(b.data()), b.size())));
      })
      .def("__len__", &Buffer::size)
      .def("__bytes__", [](const Buffer& b) { return nb::bytes(reinterpret_cast<const char*>(b.data()), b.size()); })
      .def("tobytes", [](const Buffer& b) { return nb::bytes(reinterpret_cast<const char*>(b.data()), b.size()); },
           "A copy as bytes.")
      .def("__repr__", [](const Buffer& b) { return "<s3stream.Buffer " + std::to_string(b.size()) + " bytes>"; });
}

}  // namespace s3stream::bindings
