// A small decoder of any family for tests that build one: odd sizes, GQA (6 heads over 2 KV
// heads), two layers with default RoPE and no window, f32 weights. Tests change the fields
// their case is about.
#pragma once

#include <string>

#include "models/decoder.h"

namespace gearbox::testing {

inline models::DecoderDescription small_decoder(const std::string& family) {
  models::DecoderDescription d;
  d.family = family;
  d.vocab = 97;
  d.hidden = 48;
  d.intermediate = 80;
  d.heads = 6;
  d.kv_heads = 2;
  d.head_dim = 16;
  d.layers.assign(2, models::DecoderLayer{});
  d.query_pre_attn_scalar = 16.0f;
  d.max_context = 64;
  return d;
}

}  // namespace gearbox::testing
