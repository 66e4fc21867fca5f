// Progress of long work (prefill of a long context, an evaluation grid, a calibration) on stderr.
// On a terminal: one bar redrawn in place ("\r...\x1b[K", at most every 0.2 s) and a newline at
// the end. Not on a terminal (a log file, a pipe, CI): plain lines, one every 10 s and one at the
// end, each a complete line in the same format:
//
//   [##########..............] 512/1042 tokens  49.1% | elapsed 3s ETA 3s | prefill
//
// (bar of 24 cells, units done/total with the unit name when given, percent by weight, elapsed
// time, ETA from the weight done so far, the label). The ETA weighs each unit (e.g. a sample by
// its context length) so that long samples late in a run do not make it optimistic. `delay`
// keeps short work silent: nothing is drawn before it has run that long, and then no final line.
#pragma once
#include <cstddef>
#include <cstdio>
#include <functional>
#include <string>

#include "core/timer.h"

namespace kvs {

std::string format_duration(double seconds);  // "42s", "3m05s", "2h07m"

struct ProgressOptions {
  enum class Mode { Auto, Terminal, Lines, Off };
  Mode mode = Mode::Auto;       // Auto: Terminal when `out` is a TTY, else Lines
  std::FILE* out = stderr;
  std::string unit;             // "tokens": "512/1042 tokens"
  double terminal_interval = 0.2;  // seconds between redraws on a terminal
  double line_interval = 10;       // seconds between plain lines
  double delay = 0;                // nothing drawn before this many seconds
};

// What the CLI uses for prefill: "tokens", silent for a prefill shorter than a second.
inline ProgressOptions prefill_progress_options() {
  ProgressOptions o;
  o.unit = "tokens";
  o.delay = 1.0;
  return o;
}

class Progress {
 public:
  Progress(size_t units, double weight, ProgressOptions opt);
  // enabled = false: Mode::Off (the eval's --no-progress).
  Progress(size_t units, double weight, bool enabled);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void set_label(std::string label) { label_ = std::move(label); }
  // `units` more units done, of total weight `weight`.
  void advance(double weight, size_t units = 1);
  // Ends the display (a final line or the newline after the bar); also run by the destructor.
  void finish();
  // The current line, without control characters.
  std::string line() const;
  ProgressOptions::Mode mode() const { return mode_; }

 private:
  void draw(bool force);
  size_t units_ = 0, done_ = 0;
  double weight_ = 0, done_weight_ = 0;
  ProgressOptions opt_;
  ProgressOptions::Mode mode_;
  std::string label_;
  Timer t_;
  double last_draw_ = -1e9;
  bool drawn_ = false, finished_ = false;
};

// A (done, total) callback drawing a Progress of `total` units per run (e.g. each prefill, fed
// chunk by chunk): a run ends when done reaches total, and a new one starts whenever done does not
// grow. Each unit weighs 1.
std::function<void(size_t done, size_t total)> progress_callback(std::string label, ProgressOptions opt);

}  // namespace kvs
