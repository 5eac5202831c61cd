// gearbox/executorch/binding_names.h: the arguments of a gearbox-delegated method.
//
// ExecuTorch passes a delegate its inputs, then its outputs, in the engine's binding
// order. For the decoder engines gearbox exports:
//
//   args[0] tokens    int64 [1, seq]   token ids, each in [0, vocab)
//   args[1] positions int64 [1, seq]   KV-cache positions, each in [0, max context)
//   args[2] logits    float [1, 1, vocab] (or [1, seq, vocab] for all-position engines),
//                     resized by the delegate to the shape the call produced
#pragma once

#include "gearbox/binding_names.h"

namespace gearbox::executorch {

/// Index of `tokens` in a delegate call's arguments.
inline constexpr int kTokensArg = 0;
/// Index of `positions`.
inline constexpr int kPositionsArg = 1;
/// Index of `logits` (the first output).
inline constexpr int kLogitsArg = 2;

}  // namespace gearbox::executorch
