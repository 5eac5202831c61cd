// gearbox/stream.h: an in-order queue of device work.
//
// Work enqueued on a stream runs in order, asynchronously to the caller; synchronize()
// waits for it. On CUDA a Stream wraps a cudaStream_t; on the CPU it is a worker thread,
// so the asynchronous contract (enqueue returns before the work is done) holds there too.
//
// A failure inside enqueued work is sticky, as on CUDA: the stream skips later work and
// reports the first error from synchronize() and from later enqueues.
//
//   auto stream = gearbox::Stream::create(gearbox::DeviceKind::kCpu);
//   session.run(inputs, outputs, &*stream);   // returns before the work is done
//   if (auto s = stream->synchronize(); !s.ok()) { ... }
#pragma once

#include <memory>

#include "gearbox/device.h"
#include "gearbox/export.h"
#include "gearbox/status.h"

namespace gearbox {

namespace internal {
class StreamImpl;
}  // namespace internal

/// A device stream; copyable handle (copies refer to the same queue). Thread-safe.
class GEARBOX_API Stream {
 public:
  /// A new stream on device `index` of `kind`. Errors: kUnimplemented for a device this
  /// build lacks, kNotFound for a missing device, kDeviceError when the device fails.
  static Result<Stream> create(DeviceKind kind, int32_t index = 0);

  /// Waits until every enqueued piece of work has finished. Returns the stream's sticky
  /// error, if any work failed.
  Status synchronize();
  /// The device kind this stream runs on.
  DeviceKind device() const noexcept;

  /// Implementation access for gearbox's runtime; not part of the stable API.
  internal::StreamImpl* impl() const noexcept { return impl_.get(); }
  /// Wraps an implementation; used by gearbox's runtime.
  explicit Stream(std::shared_ptr<internal::StreamImpl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<internal::StreamImpl> impl_;
};

}  // namespace gearbox
