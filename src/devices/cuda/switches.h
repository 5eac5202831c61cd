// Run-time switches of the CUDA device, all read in cuda_backend.cpp: GEARBOX_CUDA_FUSION,
// GEARBOX_CUDA_PDL, GEARBOX_CUDA_SHAPE_GRAPHS, and GEARBOX_CUDA_GEMV_GEOMETRIES and
// GEARBOX_CUDA_TUNE_BY_ROWS (read by the builder), each on unless set to "0".
#pragma once

#include <cstdlib>
#include <cstring>

namespace gearbox::cuda {

/// Whether the switch `name` is on: unset, or set to anything but "0". Callers read it once
/// (a function-local static), so that a process sees one value.
inline bool switch_on(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr || std::strcmp(value, "0") != 0;
}

}  // namespace gearbox::cuda
