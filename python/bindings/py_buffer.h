// RAII access to a Python object's bytes through the buffer protocol (bytes, bytearray,
// memoryview, numpy arrays, ...). Acquire with the GIL held; the view pins the memory, so it may be
// read after the GIL is released.
#pragma once

#include <nanobind/nanobind.h>

#include <span>

namespace s3stream::bindings {

class PyBufferView {
 public:
  PyBufferView(nanobind::handle obj, bool writable) {
    if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) != 0) {
      throw nanobind::python_error();
    }
  }
  ~PyBufferView() { PyBuffer_Release(&view_); }
  PyBufferView(const PyBufferView&) = delete;
  PyBufferView& operator=(const PyBufferView&) = delete;

  std::span<uint8_t> bytes() { return {static_cast<uint8_t*>(view_.buf), static_cast<size_t>(view_.len)}; }

 private:
  Py_buffer view_{};
};

}  // namespace s3stream::bindings
