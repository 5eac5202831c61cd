// One pass over rows of logits for the CLI's sampling: whether every value is finite and
// where the first largest one is. Several rows (a batched step's) are scanned on several
// threads: a step of 32 rows of a 262,144-token vocabulary reads 32 MB on the host.
#pragma once

#include <cstdint>
#include <vector>

namespace gearbox::cli {

/// One row's scan.
struct LogitsScan {
  int64_t argmax = 0;             ///< the first index of the largest value (finite rows)
  int64_t first_non_finite = -1;  ///< the first NaN or infinity; -1: none
};

/// Scans one row of `vocab` (>= 1) logits at `x`.
LogitsScan scan_logits(const float* x, int64_t vocab);

/// scan_logits of each of `rows` consecutive rows of `vocab` logits at `x`, in row order,
/// the rows shared out over at most `threads` threads (1: this thread alone).
std::vector<LogitsScan> scan_rows(const float* x, int64_t rows, int64_t vocab, int threads);

}  // namespace gearbox::cli
