// The one table of generic-op cases (ir/network.h): each a one-node network with its
// inputs, described independently of any device. The CPU test checks every case against
// a naive reference; the CUDA test runs the same cases on both devices and compares.
//
//   for (const GenericCase& c : generic_cases()) {
//     Result<CaseOutput> out = run_generic_case(c, DeviceKind::kCpu);
//     ...
//   }
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "gearbox/device.h"
#include "gearbox/dims.h"
#include "gearbox/status.h"
#include "ir/network.h"

namespace gearbox::testing {

/// How an input's or weight's values are made (deterministically, from the case name).
enum class Values {
  kUniform,   ///< f32 in [-2, 2); integers in [-5, 5]; bool 0 / 1
  kPositive,  ///< f32 in [0.25, 4) (log, sqrt, divisors)
  kNonZero,   ///< integers in [-5, 5] without 0 (divisors)
  kIndex,     ///< integers in [-bound, bound) (index_select / gather)
};

/// A network input or a weight of a case.
struct TensorSpec {
  DataType dtype = DataType::kF32;
  Dims dims;
  Values values = Values::kUniform;
  int64_t bound = 0;  ///< kIndex: the extent indexed
};

/// One case: a node of `kind` with `attrs` reading `inputs` (network inputs, in order) and
/// `weights`, writing one output of `output`.
struct GenericCase {
  std::string name;
  ir::OpKind kind = ir::OpKind::kUnary;
  ir::OpAttrs attrs;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> weights;
  DataType output = DataType::kF32;
};

/// gtest prints a case by its name.
inline void PrintTo(const GenericCase& c, std::ostream* os) { *os << c.name; }

/// Every case: each op and code, ranks 0 to 5, broadcasting, odd and size-1 extents (no
/// size 0), every dtype an op takes.
const std::vector<GenericCase>& generic_cases();

/// The case's network and payload: its one node (inputs named "in0", "in1", ...; output
/// "out"), followed by a cast to f32 where the output is bf16 or f16 (which not every
/// device returns as an engine output). A constant's network has an unused input, as an
/// engine has at least one.
struct CaseNetwork {
  ir::Network network;
  std::vector<uint8_t> payload;
};
CaseNetwork make_case_network(const GenericCase& c);

/// The bytes of a tensor of `spec`, seeded by `seed`: the same on every run and machine.
std::vector<uint8_t> make_values(const TensorSpec& spec, uint64_t seed);
/// The seed of input (or, past the inputs, weight) `i` of case `c`.
uint64_t case_seed(const GenericCase& c, size_t i);

/// An output as the engine returns it: its dtype (the binding's: f32 for a bf16 / f16
/// case), dims and bytes.
struct CaseOutput {
  DataType dtype = DataType::kF32;
  Dims dims;
  std::vector<uint8_t> bytes;
};
/// Builds the case's engine for `device` (one profile at the inputs' dims), loads it and
/// runs it once on the case's inputs. Errors: whatever building, loading or running says.
Result<CaseOutput> run_generic_case(const GenericCase& c, DeviceKind device);

}  // namespace gearbox::testing
