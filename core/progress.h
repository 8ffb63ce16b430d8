// Progress of long work (writing or verifying a checkpoint, resuming, creating swap files):
// bytes done, rate and time left, so a set-up of minutes never looks like a hang.
// - On a terminal (stderr is a TTY): one live line rewritten in place at most every
//   100 ms, "checkpoint step-8: [#######.......] 48% 1.29 GiB of 2.70 GiB, 850 MB/s, 2 s
//   left", closed with a final line.
// - Elsewhere (a log, a pipe): a plain line every `line_interval` (default 10 s), and a
//   final line with the total time and rate.
// Work that ends before `quiet_for` (default 2 s) prints nothing at all, so short runs and
// tests stay quiet. Lines go through the sink (default: stderr), never into stdout.
// Thread-safety: one thread drives a Progress.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace strata {

struct ProgressOptions {
  using Clock = std::chrono::steady_clock;
  std::chrono::milliseconds quiet_for{2000};
  std::chrono::milliseconds line_interval{10000};  // not a terminal
  std::chrono::milliseconds redraw_interval{100};  // a terminal
  // Where text goes and whether it is a terminal; default stderr and isatty(2).
  std::function<void(const std::string&)> sink;
  int terminal = -1;  // -1: ask isatty(2); 0 no; 1 yes
  // The clock, for tests.
  std::function<Clock::time_point()> now;
};

class Progress {
 public:
  // `what` names the work ("checkpoint step-8"); `total_bytes` may be 0 (unknown).
  Progress(std::string what, uint64_t total_bytes, ProgressOptions options = {});
  ~Progress();  // Finish() if not called
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // `bytes` more are done.
  void Advance(uint64_t bytes);
  // The work is done: the final line (if anything was shown, or it took long enough).
  void Finish();

  // The text of the current state, without line control ("... 48% ...").
  std::string Describe() const;

 private:
  using Clock = ProgressOptions::Clock;
  void Emit(bool final);

  std::string what_;
  uint64_t total_bytes_;
  uint64_t done_bytes_ = 0;
  ProgressOptions options_;
  bool terminal_ = false;
  Clock::time_point start_;
  Clock::time_point last_shown_;
  bool shown_ = false;
  bool finished_ = false;
};

}  // namespace strata
