#include "ir/network.h"

namespace gearbox::ir {

const char* op_kind_name(OpKind kind) noexcept {
  switch (kind) {
    case OpKind::kEmbedding: return "embedding";
    case OpKind::kRmsNorm: return "rms_norm";
    case OpKind::kLinear: return "linear";
    case OpKind::kRope: return "rope";
    case OpKind::kAttention: return "attention";
    case OpKind::kGeluTanhMul: return "gelu_tanh_mul";
    case OpKind::kSiluMul: return "silu_mul";
    case OpKind::kAdd: return "add";
    case OpKind::kTakeLast: return "take_last";
  }
  return "?";
}

}  // namespace gearbox::ir
