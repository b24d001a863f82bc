#include "tuner/tune/progress.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

namespace qtune::tune {

namespace {

std::string fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  return buffer;
}

}  // namespace

ConsoleProgress::ConsoleProgress(std::ostream& out, bool interactive) : out_(out), interactive_(interactive) {}

ConsoleProgress::~ConsoleProgress() {
  if (bar_shown_) {
    out_ << "\n";
    out_.flush();
  }
}

std::string ConsoleProgress::format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto total = static_cast<long long>(std::llround(seconds));
  const long long hours = total / 3600;
  const long long minutes = (total % 3600) / 60;
  const long long rest = total % 60;
  char buffer[64];
  if (hours > 0) {
    std::snprintf(buffer, sizeof(buffer), "%lldh%02lldm", hours, minutes);
  } else if (minutes > 0) {
    std::snprintf(buffer, sizeof(buffer), "%lldm%02llds", minutes, rest);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%llds", rest);
  }
  return buffer;
}

std::string ConsoleProgress::describe(const ProblemReport& report) {
  std::string text = problem_key(report.problem) + ": ";
  if (report.skipped_final) {
    text += "winner is final, skipped";
    if (report.winner) text += " (" + fixed(report.winner_us, 2) + " us " + report.winner->to_string() + ")";
    return text;
  }
  text += std::to_string(report.after_compile) + " candidates of " + std::to_string(report.space_total) + ", " +
          std::to_string(report.evaluations) + " evaluated (" + std::to_string(report.measured) + " measured now, " +
          std::to_string(report.reused) + " stored, " + std::to_string(report.invalid) + " invalid)";
  if (report.winner) {
    text += "; winner " + fixed(report.winner_us, 2) + " us " + report.winner->to_string();
    if (report.winner_reason != "fastest") text += " [" + report.winner_reason + "]";
    if (report.heuristic_us) text += "; heuristic " + fixed(*report.heuristic_us, 2) + " us (" +
                                     fixed(*report.heuristic_us / report.winner_us, 2) + "x)";
  } else {
    text += "; no valid candidate";
  }
  if (report.interrupted) text += " (interrupted)";
  return text;
}

void ConsoleProgress::clear_bar() {
  if (!bar_shown_) return;
  out_ << "\r\033[K";
  bar_shown_ = false;
}

void ConsoleProgress::draw_bar() {
  if (!interactive_ || !measuring_) return;
  last_draw_ = Clock::now();
  const double elapsed = std::chrono::duration<double>(Clock::now() - measure_start_).count();
  const std::size_t total = std::max(expected_, done_);
  const double fraction = total == 0 ? 1.0 : static_cast<double>(done_) / static_cast<double>(total);
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(fraction * kWidth);
  std::string bar(static_cast<size_t>(filled), '#');
  bar += std::string(static_cast<size_t>(kWidth - filled), '.');
  // Stored answers take no time: the rate is that of evaluations measured now.
  const double eta = measured_ == 0 ? NAN : elapsed / static_cast<double>(measured_) * static_cast<double>(total - done_);
  out_ << "\r\033[K[" << bar << "] " << done_ << "/" << total << " evals, " << problems_done_ << "/" << problems_
       << " problems, ETA " << format_duration(eta);
  if (!best_text_.empty()) out_ << ", best " << best_text_;
  out_.flush();
  bar_shown_ = true;
}

void ConsoleProgress::compile_progress(std::size_t done, std::size_t total) {
  if (done == 0 || compile_start_ == Clock::time_point{}) compile_start_ = Clock::now();
  const double elapsed = std::chrono::duration<double>(Clock::now() - compile_start_).count();
  const double eta = done == 0 ? NAN : elapsed / static_cast<double>(done) * static_cast<double>(total - done);
  if (interactive_) {
    out_ << "\r\033[Kcompiling " << done << "/" << total << " instantiations, ETA " << format_duration(eta);
    if (done == total) out_ << "\n";
    out_.flush();
    return;
  }
  const std::size_t percent = total == 0 ? 100 : done * 100 / total;
  if (percent / 10 != last_compile_percent_ / 10 || done == total) {
    out_ << "compiling " << done << "/" << total << " instantiations (" << format_duration(elapsed) << ")\n";
    last_compile_percent_ = percent;
  }
}

void ConsoleProgress::measuring_started(std::size_t problems, std::size_t expected_evaluations) {
  measuring_ = true;
  problems_ = problems;
  expected_ = expected_evaluations;
  measure_start_ = Clock::now();
  if (!interactive_) out_ << "measuring " << problems << " problems (about " << expected_evaluations << " evaluations)\n";
  draw_bar();
}

void ConsoleProgress::problem_started(const ProblemReport& report) {
  best_by_problem_.erase(problem_key(report.problem));
}

void ConsoleProgress::evaluated(const EvaluationEvent& event) {
  ++done_;
  if (!event.reused) ++measured_;
  if (event.problem != nullptr && event.valid && event.phase.find("-short") == std::string::npos) {
    const std::string key = problem_key(*event.problem);
    auto found = best_by_problem_.find(key);
    if (found == best_by_problem_.end() || event.time_us < found->second.first) {
      best_by_problem_[key] = {event.time_us, event.config.to_string()};
    }
    const auto& best = best_by_problem_[key];
    best_text_ = fixed(best.first, 2) + " us (m=" + std::to_string(event.problem->m) + " " + best.second + ")";
  }
  // Redraw at most ten times a second: stored answers arrive by the thousand.
  if (Clock::now() - last_draw_ > std::chrono::milliseconds(100)) draw_bar();
}

void ConsoleProgress::problem_finished(const ProblemReport& report) {
  ++problems_done_;
  clear_bar();
  out_ << "[" << problems_done_ << "/" << problems_ << "] " << describe(report) << "\n";
  draw_bar();
}

void ConsoleProgress::note(const std::string& message) {
  clear_bar();
  out_ << "note: " << message << "\n";
  draw_bar();
}

}  // namespace qtune::tune
