#pragma once
// Progress of a tune on a terminal: a bar redrawn in place (done/total evaluations, ETA, best so far) when the
// stream is interactive, else one line per problem (logs, CI, Slurm output files).
#include <chrono>
#include <cstddef>
#include <iosfwd>
#include <map>
#include <string>

#include "tuner/tune/tuner.hpp"

namespace qtune::tune {

class ConsoleProgress final : public TuneObserver {
 public:
  // `interactive`: redraw a bar with carriage returns (stderr is a TTY); else plain lines.
  ConsoleProgress(std::ostream& out, bool interactive);
  ~ConsoleProgress() override;

  void compile_progress(std::size_t done, std::size_t total) override;
  void measuring_started(std::size_t problems, std::size_t expected_evaluations) override;
  void problem_started(const ProblemReport& report) override;
  void evaluated(const EvaluationEvent& event) override;
  void problem_finished(const ProblemReport& report) override;
  void note(const std::string& message) override;

  // "1h02m", "3m05s", "12s"; "?" when unknown.
  static std::string format_duration(double seconds);
  // The one-line summary of a finished problem (also what the non-interactive mode prints).
  static std::string describe(const ProblemReport& report);

 private:
  using Clock = std::chrono::steady_clock;
  void draw_bar();
  void clear_bar();

  std::ostream& out_;
  bool interactive_;
  bool bar_shown_ = false;
  bool measuring_ = false;
  Clock::time_point compile_start_;
  std::size_t last_compile_percent_ = 101;
  Clock::time_point measure_start_;
  std::size_t problems_ = 0;
  std::size_t problems_done_ = 0;
  std::size_t expected_ = 0;
  std::size_t done_ = 0;
  std::size_t measured_ = 0;
  std::string best_text_;  // best so far of the problem last evaluated
  std::map<std::string, std::pair<double, std::string>> best_by_problem_;
  Clock::time_point last_draw_;
};

}  // namespace qtune::tune
