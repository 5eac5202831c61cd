// A network described in JSON with its weights in a safetensors file: how a front end
// that is not C++ (the ExecuTorch export in python/gearbox) hands gearbox a network to
// build. docs/FORMAT.md ("Network description") is the normative schema:
//
//   {"format": "gearbox-network", "version": 1, "max_context": 64,
//    "inputs":  [{"name": "tokens", "dtype": "i64", "dims": [1, -1], "dim_names": ["batch", "seq"]}, ...],
//    "outputs": ["logits"],
//    "states":  [{"name": "layers.0.kv_cache", "dtype": "f32", "rows": 64, "width": 80}, ...],
//    "nodes":   [{"op": "embedding", "name": "embed", "inputs": ["tokens"], "outputs": ["h"],
//                 "weights": ["model.embed_tokens.weight"], "attrs": {"scale": 17.9}}, ...],
//    "metadata": {"model.family": "gemma3", ...}}
//
// Tensors are named; a node's outputs are new activations, f32 unless the node's
// "dtypes" says otherwise. Weights are safetensors tensors (f32, bf16 or f16; a constant's
// also i32, i64 or bool), copied into the payload as stored. Every unknown key, op,
// attribute or dtype is an error naming where it is; the network is then validated as
// any other (ir/validate.h) when it is built.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "gearbox/status.h"
#include "models/decoder.h"
#include "models/safetensors.h"

namespace gearbox::models {

/// A network read from a description: the network, its payload and its metadata pairs.
struct DescribedModel {
  BuiltModel model;
  std::vector<std::pair<std::string, std::string>> metadata;
};

/// Reads `json_text` and takes the weights it names from `weights`. Errors: kDataLoss for
/// malformed JSON or a description that breaks the schema (the message names the key,
/// node and value), kNotFound for a weight the checkpoint lacks, kUnimplemented for a
/// weight dtype gearbox does not read.
Result<DescribedModel> read_network_description(const std::string& json_text, const SafetensorsCheckpoint& weights);

}  // namespace gearbox::models
