// The init_* functions, one per area of the extension module.
#pragma once

#include <nanobind/nanobind.h>

#include <memory>
#include <string>

#include "s3stream/client.h"

namespace s3stream::bindings {

void InitErrors(nanobind::module_& m);
void InitBuffer(nanobind::module_& m);
void InitClient(nanobind::module_& m);
void InitIo(nanobind::module_& m);
void InitPipeline(nanobind::module_& m);

}  // namespace s3stream::bindings
