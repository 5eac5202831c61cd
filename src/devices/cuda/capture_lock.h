// One process-wide lock between CUDA graph capture and the calls that may synchronize the
// device (cudaMalloc, cudaFree, synchronous copies, the builder's timing on the legacy
// stream). cudaFree in one thread while another thread captures a graph invalidates that
// capture (seen on the H200 with 20 threads each capturing its own context), so a capture
// holds this lock from begin to end, and those calls take it too.
#pragma once

#include <mutex>

namespace gearbox::internal {

std::mutex& cuda_capture_mutex();

}  // namespace gearbox::internal
