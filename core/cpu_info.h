// What CPU this is, for benchmark figures (which depend on it): the /proc/cpuinfo fields of
// the first processor. Thread-safety: plain functions (each reads /proc/cpuinfo).
#pragma once

#include <string>

namespace strata {

// The value of /proc/cpuinfo field `field` ("model name", "cpu family", "model") of the
// first processor; "" where absent.
std::string CpuInfoField(const std::string& field);

// "AMD EPYC (family 26 model 2), 2 CPUs": the model name, with family and model where
// the name alone is generic, and the online CPU count.
std::string DescribeCpu();

}  // namespace strata
