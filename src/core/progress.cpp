#include "core/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <memory>

namespace kvs {

std::string format_duration(double s) {
  if (!(s >= 0)) s = 0;
  const long t = static_cast<long>(s + 0.5);
  if (t < 60) return fmt::format("{}s", t);
  if (t < 3600) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}h{:02d}m", t / 3600, (t % 3600) / 60);
}

Progress::Progress(size_t units, double weight, ProgressOptions opt)
    : units_(units), weight_(weight), opt_(std::move(opt)), mode_(opt_.mode) {
  if (mode_ == ProgressOptions::Mode::Auto)
    mode_ = opt_.out && isatty(fileno(opt_.out)) ? ProgressOptions::Mode::Terminal : ProgressOptions::Mode::Lines;
  if (!opt_.out) mode_ = ProgressOptions::Mode::Off;
}

Progress::Progress(size_t units, double weight, bool enabled)
    : Progress(units, weight, [&] {
        ProgressOptions o;
        if (!enabled) o.mode = ProgressOptions::Mode::Off;
        return o;
      }()) {}

Progress::~Progress() { finish(); }

std::string Progress::line() const {
  const double frac = std::clamp(weight_ > 0 ? done_weight_ / weight_ : (units_ ? static_cast<double>(done_) / units_ : 1.0), 0.0, 1.0);
  const int width = 24;
  const int fill = static_cast<int>(frac * width + 1e-9);
  std::string bar(static_cast<size_t>(fill), '#');
  bar.resize(width, '.');
  const double el = t_.seconds();
  const std::string eta = done_weight_ > 0 ? format_duration(el / done_weight_ * std::max(0.0, weight_ - done_weight_)) : "?";
  return fmt::format("[{}] {}/{}{} {:5.1f}% | elapsed {} ETA {} | {}", bar, done_, units_, opt_.unit.empty() ? "" : " " + opt_.unit,
                     100 * frac, format_duration(el), eta, label_);
}

void Progress::draw(bool force) {
  using M = ProgressOptions::Mode;
  if (mode_ == M::Off || finished_) return;
  const double now = t_.seconds();
  if (now < opt_.delay) return;
  if (mode_ == M::Terminal) {
    if (!force && now - last_draw_ < opt_.terminal_interval) return;
    std::string l = line();
    if (l.size() > 150) l.resize(150);
    std::fprintf(opt_.out, "\r%s\x1b[K", l.c_str());
  } else {
    if (!force && now - last_draw_ < opt_.line_interval) return;
    std::fprintf(opt_.out, "%s\n", line().c_str());
  }
  std::fflush(opt_.out);
  last_draw_ = now;
  drawn_ = true;
}

void Progress::advance(double w, size_t n) {
  done_ += n;
  done_weight_ += w;
  // The last unit is drawn at once (unless still inside the delay): finish() then adds nothing.
  draw(done_ >= units_);
}

void Progress::finish() {
  using M = ProgressOptions::Mode;
  if (finished_ || mode_ == M::Off) {
    finished_ = true;
    return;
  }
  // Short work that never showed stays silent; otherwise the display ends on a complete line.
  if (opt_.delay <= 0 || drawn_) {
    if (mode_ == M::Terminal) {
      draw(true);
      std::fprintf(opt_.out, "\n");
      std::fflush(opt_.out);
    } else if (!drawn_ || done_ != units_ || units_ == 0) {
      draw(true);
    }
  }
  finished_ = true;
}

std::function<void(size_t, size_t)> progress_callback(std::string label, ProgressOptions opt) {
  struct Run {
    std::unique_ptr<Progress> p;
    size_t done = 0;
  };
  auto run = std::make_shared<Run>();
  return [run, label = std::move(label), opt = std::move(opt)](size_t done, size_t total) {
    if (!run->p || done <= run->done) {
      run->p = std::make_unique<Progress>(total, static_cast<double>(total), opt);
      run->p->set_label(label);
      run->done = 0;
    }
    run->p->advance(static_cast<double>(done - run->done), done - run->done);
    run->done = done;
    if (done >= total) {
      run->p->finish();
      run->p.reset();
    }
  };
}

}  // namespace kvs
