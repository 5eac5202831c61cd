// gearbox/binding_names.h: the names of the inputs and outputs of gearbox's LLM engines.
//
// Every decoder network gearbox builds (gearbox build, and later the ExecuTorch export)
// uses these names, in this order, so a runner can bind by name:
//
//   inputs:  tokens    [batch, seq] i64   token ids, each in [0, vocab)
//            positions [batch, seq] i64   their positions in the KV cache, in [0, max context)
//            slots     [batch]      i64   batched engines only: each row's KV-cache slot
//   outputs: logits    [batch, 1, vocab] f32 (or [batch, seq, vocab] for all-position engines)
#pragma once

namespace gearbox {

/// Token ids input.
inline constexpr const char* kTokensBinding = "tokens";
/// Positions input (where each token's K/V are written and which keys it may see).
inline constexpr const char* kPositionsBinding = "positions";
/// KV-cache slot per row (batched engines only): in [0, Engine::max_batch()), or -1 for
/// a row of padding.
inline constexpr const char* kSlotsBinding = "slots";
/// Logits output.
inline constexpr const char* kLogitsBinding = "logits";
/// Names of the two dims of `tokens` and `positions`.
inline constexpr const char* kBatchDim = "batch";
/// See kBatchDim.
inline constexpr const char* kSeqDim = "seq";

}  // namespace gearbox
