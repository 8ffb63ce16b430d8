// Run id and process description; see run_identity.h.
#include "core/files.h"
#include "core/run_identity.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>

namespace strata {
namespace {

std::mutex g_mutex;
std::string* g_run_id = nullptr;  // guarded by g_mutex; created on first use

std::string NewRunId() {
  std::random_device device;
  const uint64_t random = (uint64_t{device()} << 32) ^ device() ^
                          static_cast<uint64_t>(
                              std::chrono::steady_clock::now().time_since_epoch().count());
  char text[16];
  std::snprintf(text, sizeof(text), "%06x%06x", static_cast<unsigned>(::getpid()) & 0xffffff,
                static_cast<unsigned>(random & 0xffffff));
  return text;
}

const std::string& StartTime() {
  static const std::string text = [] {
    const std::time_t now = std::time(nullptr);
    std::tm utc{};
    gmtime_r(&now, &utc);
    char buffer[32];
    std::strftime(buffer, sizeof(buffer), "%Y-%m-%d %H:%M:%S UTC", &utc);
    return std::string(buffer);
  }();
  return text;
}

std::string CommandLine() {
  const std::string all = ReadFile("/proc/self/cmdline").value_or("");
  std::string line;
  size_t begin = 0;
  while (begin < all.size()) {
    size_t end = all.find('\0', begin);
    if (end == std::string::npos) end = all.size();
    std::string word = all.substr(begin, end - begin);
    if (!line.empty()) line += ' ';
    if (begin == 0) word = word.substr(word.rfind('/') + 1);  // the program's base name
    line += word;
    begin = end + 1;
  }
  if (line.size() > 300) line = line.substr(0, 297) + "...";
  return line;
}

// Fixed when the program starts, not at the first description.
const std::string& g_start_time = StartTime();

}  // namespace

std::string RunId() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_run_id == nullptr) g_run_id = new std::string(NewRunId());
  return *g_run_id;
}

bool SetRunId(const std::string& id) {
  if (id.empty() || id.size() > 32) return false;
  for (char c : id) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z'))) return false;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_run_id == nullptr) g_run_id = new std::string();
  *g_run_id = id;
  return true;
}

std::string HostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "?";
  return host;
}

std::string DescribeThisProcess() {
  std::ostringstream out;
  out << "pid " << ::getpid() << " on host " << HostName() << ", started " << StartTime() << ": "
      << CommandLine();
  return out.str();
}

}  // namespace strata
