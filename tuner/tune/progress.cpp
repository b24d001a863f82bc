#include "tuner/tune/progress.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

#include "kernels/text_escape.hpp"

namespace qtune::tune {

namespace {

// "[#########...............] ": the whole run's share done.
std::string bar_text(double fraction) {
  constexpr int kWidth = 24;
  const int filled = std::clamp(static_cast<int>(fraction * kWidth), 0, kWidth);
  return "[" + std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(kWidth - filled), '.') + "] ";
}

}  // namespace

std::size_t WorkPlan::add_stage(std::string name, double weight, std::string kind) {
  stages_.push_back({std::move(name), std::max(0.0, weight), std::move(kind), false, 0});
  return stages_.size() - 1;
}

void WorkPlan::set_weight(std::size_t stage, double weight) {
  Stage& known = stages_.at(stage);
  weight = std::max(0.0, weight);
  if (!known.known && known.weight > 0 && !known.kind.empty()) {
    const double ratio = weight / known.weight;
    for (Stage& other : stages_) {
      if (&other != &known && !other.known && other.kind == known.kind) other.weight *= ratio;
    }
  }
  known.weight = weight;
  known.known = true;
}

void WorkPlan::set_progress(std::size_t stage, std::size_t done, std::size_t total) {
  stages_.at(stage).done = total == 0 ? 1.0 : std::min(1.0, static_cast<double>(done) / static_cast<double>(total));
}

double WorkPlan::fraction() const {
  double total = 0;
  double done = 0;
  for (const Stage& stage : stages_) {
    total += stage.weight;
    done += stage.weight * stage.done;
  }
  return total > 0 ? done / total : 1.0;
}

double WorkPlan::eta_seconds(double elapsed_seconds) const {
  const double done = fraction();
  if (!(done > 0)) return NAN;
  return elapsed_seconds * (1 - done) / done;
}

PhaseEstimate estimate_problem_work(std::size_t candidates, std::size_t threads, double evaluated_share, double time_budget_s,
                                    bool dry_run) {
  PhaseEstimate estimate;
  const auto count = static_cast<double>(candidates);
  estimate.compile_seconds = count * kCompileSecondsPerInstantiation / static_cast<double>(std::max<std::size_t>(threads, 1));
  estimate.measure_seconds = dry_run ? 0 : count * evaluated_share * (time_budget_s + kEvaluationOverheadSeconds);
  return estimate;
}

ConsoleProgress::ConsoleProgress(std::ostream& out, bool interactive)
    : out_(out), interactive_(interactive), run_start_(Clock::now()) {}

void ConsoleProgress::set_plan(WorkPlan plan, std::size_t threads, double time_budget_s) {
  plan_ = std::move(plan);
  threads_ = std::max<std::size_t>(threads, 1);
  time_budget_s_ = time_budget_s;
}

void ConsoleProgress::end_stages() {
  if (compile_stage_ != kNoStage) plan_.finish(compile_stage_);
  if (measure_stage_ != kNoStage) plan_.finish(measure_stage_);
}

void ConsoleProgress::start_stages(std::size_t compile_stage, std::size_t measure_stage) {
  end_stages();
  compile_stage_ = compile_stage;
  measure_stage_ = measure_stage;
  measuring_ = false;
  compile_start_ = Clock::time_point{};
  last_compile_percent_ = 101;
  compile_seconds_each_ = kCompileSecondsPerInstantiation;
  problems_ = problems_done_ = expected_ = done_ = 0;
}

std::size_t ConsoleProgress::stage_for(std::size_t& stage, const std::string& name) {
  if (stage == kNoStage) stage = plan_.add_stage(name, 1, name);
  return stage;
}

std::string ConsoleProgress::run_text() const {
  const double elapsed = std::chrono::duration<double>(Clock::now() - run_start_).count();
  return "run " + std::to_string(static_cast<int>(100 * plan_.fraction())) + "%, ETA " + format_duration(plan_.eta_seconds(elapsed));
}

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
    if (!report.heuristic_failure.empty()) text += "; heuristic failed (" + report.heuristic_failure + ")";
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
  const std::size_t total = std::max(expected_, done_);
  out_ << "\r\033[K" << bar_text(plan_.fraction()) << plan_.name(measure_stage_) << " " << done_ << "/" << total << " evals, "
       << problems_done_ << "/" << problems_ << " problems; " << run_text();
  if (!best_text_.empty()) out_ << ", best " << best_text_;
  out_.flush();
  bar_shown_ = true;
}

void ConsoleProgress::compile_progress(std::size_t done, std::size_t total) {
  if (done == 0 || compile_start_ == Clock::time_point{}) compile_start_ = Clock::now();
  const std::size_t stage = stage_for(compile_stage_, "compiling");
  // The real size replaces the plan's estimate, in the same unit (estimated seconds).
  plan_.set_weight(stage, static_cast<double>(total) * compile_seconds_each_ / static_cast<double>(threads_));
  plan_.set_progress(stage, done, total);
  const std::string counts = plan_.name(stage) + " " + std::to_string(done) + "/" + std::to_string(total) + " instantiations";
  if (interactive_) {
    out_ << "\r\033[K" << bar_text(plan_.fraction()) << counts << "; " << run_text();
    if (done == total) out_ << "\n";
    out_.flush();
    return;
  }
  const std::size_t percent = total == 0 ? 100 : done * 100 / total;
  if (percent / 10 != last_compile_percent_ / 10 || done == total) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - compile_start_).count();
    out_ << counts << " (" << format_duration(elapsed) << "); " << run_text() << "\n";
    last_compile_percent_ = percent;
  }
}

void ConsoleProgress::compile_seconds_each(double seconds) { compile_seconds_each_ = seconds; }

void ConsoleProgress::measuring_started(std::size_t problems, std::size_t expected_evaluations) {
  measuring_ = true;
  problems_ = problems;
  expected_ = expected_evaluations;
  const std::size_t stage = stage_for(measure_stage_, "measuring");
  plan_.set_weight(stage, static_cast<double>(expected_evaluations) * (time_budget_s_ + kEvaluationOverheadSeconds));
  plan_.set_progress(stage, 0, expected_evaluations);
  if (!interactive_) out_ << "measuring " << problems << " problems (about " << expected_evaluations << " evaluations)\n";
  draw_bar();
}

void ConsoleProgress::problem_started(const ProblemReport& report) {
  best_by_problem_.erase(problem_key(report.problem));
}

void ConsoleProgress::evaluated(const EvaluationEvent& event) {
  ++done_;
  if (measure_stage_ != kNoStage) plan_.set_progress(measure_stage_, done_, std::max(expected_, done_));
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
  out_ << "[" << problems_done_ << "/" << problems_ << "] " << describe(report);
  if (!interactive_) out_ << "; " << run_text();  // the bar shows it on a terminal
  out_ << "\n";
  draw_bar();
}

void ConsoleProgress::problem_line(std::size_t stage, std::size_t done, std::size_t total, const std::string& line) {
  end_stages();  // the families' stages before it are over
  plan_.set_progress(stage, done, total);
  clear_bar();
  out_ << "[" << done << "/" << total << "] " << line << "; " << run_text() << "\n";
  out_.flush();
}

void ConsoleProgress::note(const std::string& message) {
  clear_bar();
  out_ << "note: " << message << "\n";
  draw_bar();
}

}  // namespace qtune::tune
