// What the fuzz targets of fuzz/ share: a scratch directory of this process's own, for the
// parsers whose public entry point takes a path (a safetensors file, a model directory's
// config.json, a token file, a checkpoint's checkpoint.json), and the per-input reset of
// process-wide state a parser touches.
// Invariants: the directory is made on first use under $TEST_TMPDIR, else $TMPDIR, else
// /tmp (mkdtemp: no other process shares it, so parallel fuzzing jobs do not collide) and
// removed with everything in it when the process exits normally (kept, and its path
// printed, when STRATA_FUZZ_KEEP_SCRATCH is set: to look at what a target wrote); a file is
// rewritten in place (its inode stays), so a registry keyed by inode sees one file, not one
// per input.
// A failure of the scratch directory itself aborts: it is the harness that broke, never a
// finding about the parser.
// Thread-safety: none; libFuzzer calls a target from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata {
namespace fuzz {

// This process's scratch directory (made on first call).
const std::string& ScratchDir();

// `bytes` as the file ScratchDir()/`name` (`name` may hold one level of subdirectory,
// made on demand); returns its path.
std::string WriteScratchFile(const std::string& name, std::string_view bytes);
inline std::string WriteScratchFile(const std::string& name, const uint8_t* data, size_t size) {
  return WriteScratchFile(name, std::string_view(reinterpret_cast<const char*>(data), size));
}

// Removes ScratchDir()/`name` if it exists.
void RemoveScratchFile(const std::string& name);

// Forgets what the previous input left in process-wide registries (the run's noted inputs,
// core/run_inputs.h), so that memory stays flat over millions of inputs and one input's
// outcome does not depend on the ones before it.
void ResetProcessState();

}  // namespace fuzz
}  // namespace strata
