// Fuzz target: a hardware file for `strata plan --hardware` (plan/hardware.h,
// ParseHardware, in memory): the format and version, every field by name with its type and
// range, unknown fields. A file that parses is written back (HardwareJson), which must
// parse again to the same text.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_scratch.h"
#include "plan/hardware.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::ResetProcessState();
  const std::string text(reinterpret_cast<const char*>(data), size);
  strata::StatusOr<strata::Hardware> hardware = strata::ParseHardware(text, "fuzz input");
  if (!hardware.ok()) return 0;
  const std::string written = strata::HardwareJson(*hardware);
  strata::StatusOr<strata::Hardware> again = strata::ParseHardware(written, "written back");
  if (!again.ok() || strata::HardwareJson(*again) != written) __builtin_trap();
  return 0;
}
