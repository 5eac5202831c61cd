// Tactic tables as engine files and tactic caches store them (docs/FORMAT.md, section 3),
// shared by the engine reader/writer and the tactic cache.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "format/binary_io.h"
#include "format/engine_file.h"

namespace gearbox::format {

/// Appends a count and the tables.
void write_tactic_tables(ByteWriter& w, const std::vector<TacticTable>& tables);
/// Reads what write_tactic_tables wrote (bounds-checked; kDataLoss through `r`).
Status read_tactic_tables(ByteReader& r, std::vector<TacticTable>& tables);
/// Checks desc.tactic_tables against desc's network and profiles (one entry per profile,
/// one tactic and a finite time per node, no two tables for one device and library).
Status check_tactic_tables(const EngineDesc& desc);
/// Writes `bytes` to `path` through a temporary file and a rename; `what` names the file
/// in messages ("engine", "tactic cache").
Status write_file_atomically(const std::string& path, std::span<const uint8_t> bytes, const std::string& what);

}  // namespace gearbox::format
