// Progress lines and bars; see progress.h.
#include "core/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "core/bytes.h"

namespace strata {

Progress::Progress(std::string what, uint64_t total_bytes, ProgressOptions options)
    : what_(std::move(what)), total_bytes_(total_bytes), options_(std::move(options)) {
  if (!options_.now) options_.now = [] { return Clock::now(); };
  if (!options_.sink) {
    options_.sink = [](const std::string& text) {
      std::fputs(text.c_str(), stderr);
      std::fflush(stderr);
    };
  }
  terminal_ = options_.terminal < 0 ? ::isatty(STDERR_FILENO) == 1 : options_.terminal == 1;
  start_ = options_.now();
  last_shown_ = start_;
}

Progress::~Progress() { Finish(); }

std::string Progress::Describe() const {
  const double seconds =
      std::chrono::duration<double>(options_.now() - start_).count();
  const double rate = seconds > 0 ? static_cast<double>(done_bytes_) / seconds : 0;
  std::string text = what_ + ": ";
  if (total_bytes_ > 0) {
    const double fraction =
        std::min(1.0, static_cast<double>(done_bytes_) / static_cast<double>(total_bytes_));
    if (terminal_) {
      constexpr int kWidth = 20;
      const int filled = static_cast<int>(fraction * kWidth);
      text += "[" + std::string(filled, '#') + std::string(kWidth - filled, '.') + "] ";
    }
    absl::StrAppendFormat(&text, "%d%% %s of %s", static_cast<int>(fraction * 100),
                          FormatBytes(done_bytes_), FormatBytes(total_bytes_));
  } else {
    text += FormatBytes(done_bytes_);
  }
  absl::StrAppendFormat(&text, ", %.0f MB/s", rate / 1e6);
  if (total_bytes_ > done_bytes_ && rate > 0) {
    absl::StrAppendFormat(&text, ", %.0f s left",
                          static_cast<double>(total_bytes_ - done_bytes_) / rate);
  }
  return text;
}

void Progress::Emit(bool final) {
  const std::string text = Describe();
  if (terminal_) {
    options_.sink("\r" + text + (final ? "\n" : "\x1b[K"));
  } else {
    options_.sink(text + "\n");
  }
  shown_ = true;
  last_shown_ = options_.now();
}

void Progress::Advance(uint64_t bytes) {
  if (finished_) return;
  done_bytes_ += bytes;
  const Clock::time_point now = options_.now();
  if (now - start_ < options_.quiet_for) return;
  const auto interval = terminal_ ? options_.redraw_interval : options_.line_interval;
  if (!shown_ || now - last_shown_ >= interval) Emit(false);
}

void Progress::Finish() {
  if (finished_) return;
  finished_ = true;
  if (shown_ || options_.now() - start_ >= options_.quiet_for) {
    const double seconds = std::chrono::duration<double>(options_.now() - start_).count();
    if (terminal_) {
      Emit(true);
    } else {
      options_.sink(absl::StrFormat("%s: done, %s in %.1f s\n", what_, FormatBytes(done_bytes_),
                                    seconds));
    }
  }
}

}  // namespace strata
