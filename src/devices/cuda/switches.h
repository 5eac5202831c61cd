// Run-time switches of the CUDA device (README): GEARBOX_CUDA_FUSION, GEARBOX_CUDA_PDL,
// GEARBOX_CUDA_CLUSTER_COMBINE, GEARBOX_CUDA_ROUNDED_GATE_UP, GEARBOX_CUDA_HEAD_NORM_WARPS,
// GEARBOX_CUDA_SHAPE_GRAPHS, GEARBOX_CUDA_GEMV_PERSISTENT, GEARBOX_CUDA_EARLY_KEYS,
// GEARBOX_CUDA_NORM_INTO_GEMV,
// and GEARBOX_CUDA_GEMV_GEOMETRIES and GEARBOX_CUDA_TUNE_BY_ROWS (read by the builder), each
// on unless set to "0", for measuring what each mechanism buys
// (docs/PERFORMANCE.md). GEARBOX_CUDA_DECODE_KERNEL (off unless "1" or "auto") is read in
// cuda_backend.cpp.
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
