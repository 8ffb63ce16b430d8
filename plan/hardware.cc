// See hardware.h.
#include "plan/hardware.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace strata {
namespace {

constexpr char kHardwareFormat[] = "strata-hardware";

// 2^64: a byte count at or above it does not fit uint64_t (a double cast to it would be
// undefined behaviour).
constexpr double kTwoTo64 = 18446744073709551616.0;

StatusOr<Hardware> ParseHardwareJson(const nlohmann::json& json, const std::string& where) {
  if (!json.is_object() || json.value("format", "") != kHardwareFormat) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, " is not a strata hardware file (expected \"format\": \"", kHardwareFormat,
        "\"; write one with strata plan --hardware probe --save-hardware FILE)"));
  }
  // Compared as JSON: value<int>() of 1e300 would cast a double that fits no int.
  const nlohmann::json version = json.value("version", nlohmann::json(0));
  if (!version.is_number_integer() || version != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": hardware format version ", version.dump(), " (this strata reads version 1)"));
  }
  Hardware hw;
  hw.source = json.contains("source") && json.at("source").is_string()
                  ? json.at("source").get<std::string>()
                  : where;
  std::vector<std::string> problems;
  struct Field {
    const char* name;
    double* rate = nullptr;
    uint64_t* bytes = nullptr;
    int* count = nullptr;
  };
  const std::vector<Field> fields = {
      {"device_memory_bytes", nullptr, &hw.device_memory_bytes},
      {"matmul_flops_fp32", &hw.matmul_flops_fp32},
      {"matmul_flops_bf16", &hw.matmul_flops_bf16},
      {"device_memory_bandwidth", &hw.device_memory_bandwidth},
      {"host_memory_bytes", nullptr, &hw.host_memory_bytes},
      {"host_to_device", &hw.host_to_device},
      {"device_to_host", &hw.device_to_host},
      {"cpu_adam_params", &hw.cpu_adam_params},
      {"cpu_adam8bit_params", &hw.cpu_adam8bit_params},
      {"disk_read", &hw.disk_read},
      {"disk_write", &hw.disk_write},
      {"disk_free_bytes", nullptr, &hw.disk_free_bytes},
      {"network", &hw.network},
      {"nodes", nullptr, nullptr, &hw.nodes},
      {"ranks_per_node", nullptr, nullptr, &hw.ranks_per_node},
      {"inter_node_network", &hw.inter_node_network},
  };
  std::set<std::string> known = {"format", "version", "backend", "source"};
  for (const Field& field : fields) known.insert(field.name);
  for (const auto& [key, value] : json.items()) {
    if (known.count(key) == 0) {
      std::vector<std::string> names(known.begin(), known.end());
      problems.push_back(absl::StrCat("unknown field \"", key, "\" (known: ",
                                      absl::StrJoin(names, ", "), ")"));
    }
  }
  const std::string backend = json.value("backend", "cpu");
  if (backend == "cpu" || backend == "cuda") {
    hw.backend = backend == "cpu" ? BackendKind::kCpu : BackendKind::kCuda;
  } else {
    problems.push_back(absl::StrCat("backend: got \"", backend, "\", expected cpu or cuda"));
  }
  for (const Field& field : fields) {
    if (!json.contains(field.name)) continue;
    const nlohmann::json& value = json.at(field.name);
    if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < 0) {
      problems.push_back(absl::StrCat(field.name, ": got ", value.dump(),
                                      ", expected a number >= 0"));
      continue;
    }
    if (field.rate != nullptr) *field.rate = value.get<double>();
    if (field.bytes != nullptr) {
      if (!value.is_number_integer() && value.get<double>() >= kTwoTo64) {
        problems.push_back(absl::StrCat(field.name, ": got ", value.dump(),
                                        ", expected a number of bytes below 2^64"));
        continue;
      }
      *field.bytes = value.is_number_integer() ? value.get<uint64_t>()
                                               : static_cast<uint64_t>(value.get<double>());
    }
    if (field.count != nullptr) {
      if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > 65536) {
        problems.push_back(absl::StrCat(field.name, ": got ", value.dump(),
                                        ", expected an integer in [1, 65536]"));
        continue;
      }
      *field.count = value.get<int>();
    }
  }
  if (hw.device_memory_bytes == 0) problems.push_back("device_memory_bytes: missing or 0");
  if (hw.host_memory_bytes == 0) problems.push_back("host_memory_bytes: missing or 0");
  if (hw.nodes > 1 && hw.inter_node_network <= 0) {
    problems.push_back(absl::StrCat("inter_node_network: missing or 0, but nodes is ", hw.nodes,
                                    " (the bytes per second one node sends to the others)"));
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ":\n  ", absl::StrJoin(problems, "\n  ")));
  }
  return hw;
}

}  // namespace

StatusOr<Hardware> ParseHardware(const std::string& text, const std::string& where) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(where, " is not valid JSON: ", e.what()));
  }
  // A field of the wrong type ("format": 1, "backend": true) throws in nlohmann's accessors:
  // it is an error naming the file, as every parser of outside input returns Status.
  try {
    return ParseHardwareJson(json, where);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": a field of the wrong type (", e.what(), ")"));
  }
}

std::string HardwareJson(const Hardware& hw) {
  nlohmann::ordered_json json = {
      {"format", kHardwareFormat},
      {"version", 1},
      {"source", hw.source},
      {"backend", hw.backend == BackendKind::kCpu ? "cpu" : "cuda"},
      {"device_memory_bytes", hw.device_memory_bytes},
      {"matmul_flops_fp32", hw.matmul_flops_fp32},
      {"matmul_flops_bf16", hw.matmul_flops_bf16},
      {"device_memory_bandwidth", hw.device_memory_bandwidth},
      {"host_memory_bytes", hw.host_memory_bytes},
      {"host_to_device", hw.host_to_device},
      {"device_to_host", hw.device_to_host},
      {"cpu_adam_params", hw.cpu_adam_params},
      {"cpu_adam8bit_params", hw.cpu_adam8bit_params},
      {"disk_read", hw.disk_read},
      {"disk_write", hw.disk_write},
      {"disk_free_bytes", hw.disk_free_bytes},
      {"network", hw.network},
      {"nodes", hw.nodes},
      {"ranks_per_node", hw.ranks_per_node},
      {"inter_node_network", hw.inter_node_network},
  };
  return json.dump(2) + "\n";
}

}  // namespace strata
