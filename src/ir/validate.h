// Structural validation of a Network: everything that can be checked without input dims.
#pragma once

#include <cstdint>
#include <string>

#include "gearbox/status.h"
#include "ir/network.h"

namespace gearbox::ir {

/// Checks that every id is in range, every op has the inputs, outputs, weights and
/// attributes its kind needs (see network.h), every tensor is produced exactly once before
/// it is read, weights lie inside a payload of `payload_bytes` with 64-byte aligned offsets
/// and bytes == volume * dtype size, and state specs are positive and bounded.
/// Errors: kInvalidArgument naming the node (index, name, kind) or item and the rule.
Status validate_network(const Network& network, uint64_t payload_bytes);

/// validate_network's checks of one generic op (network.h) whose ids are already checked:
/// arity, codes, axes, perms, shape specs and dtypes. Errors start with `label`.
Status validate_generic_node(const Network& network, const Node& node, const std::string& label);

}  // namespace gearbox::ir
