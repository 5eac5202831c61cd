// The one way gearbox writes a file: checked before any work starts, written to a
// temporary file in the same directory and renamed over the destination, so a reader sees
// the old file or the new one and a failure (or SIGINT/SIGTERM) leaves the old one as it
// was, with no temporary behind.
//
//   if (Status s = check_output_path(out, {engine_path}, "benchmark JSON"); !s.ok()) return s;
//   ... the work ...
//   if (Status s = write_output_file(out, bytes, "benchmark JSON"); !s.ok()) return s;
//
// Refused destinations: an existing symbolic link, directory, FIFO, device or socket (a
// rename would replace the link or the node with a regular file), and (check_output_path)
// a file this process reads: the same device and inode as an input. An existing file keeps
// its mode.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gearbox/status.h"

namespace gearbox {

/// Checks, before the work, that `path` can be written: not a symbolic link or a
/// non-regular file, not the same file as any of `inputs` (paths of files or of
/// directories, compared by device and inode) nor as any file opened so far with
/// InputFile::open, and its directory exists and takes a new file (a probe file is
/// created and removed). `what` names the output in messages ("engine"). Errors:
/// kInvalidArgument (empty path, same file as an input), kFailedPrecondition (a link or
/// non-regular file; the directory is missing, not a directory or not writable).
Status check_output_path(const std::string& path, const std::vector<std::string>& inputs, std::string_view what);

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename.
/// The temporary is removed on every failure, and on SIGINT or SIGTERM while it exists
/// (the signal is then re-raised with its default action). Refuses a destination that is
/// a symbolic link or not a regular file; keeps the mode of an existing file. (Whether it
/// is an input is check_output_path's question: a tactic cache read at load is rewritten
/// when it turns out stale.) Errors: kFailedPrecondition, kInvalidArgument, kNotFound
/// (the directory does not exist), kDeviceError (create, write or rename failed).
Status write_output_file(const std::string& path, std::span<const uint8_t> bytes, std::string_view what);

/// The same for text.
Status write_output_file(const std::string& path, std::string_view text, std::string_view what);

}  // namespace gearbox
