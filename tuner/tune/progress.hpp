#pragma once
// Progress of a tune on a terminal: one bar for the whole run (every family's compile and measuring phases, weighted
// by their estimated work, with one ETA) redrawn in place when the stream is interactive, else one line per problem
// and a progress line per tenth of the run (logs, CI, Slurm output files).
#include <chrono>
#include <cstddef>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "tuner/tune/tuner.hpp"

namespace qtune::tune {

// The work of a whole run as stages (per family: compile, then measure) weighted by estimated seconds, so that one
// fraction and one ETA cover all of them. A stage's own share comes from its done/total counts.
class WorkPlan {
 public:
  // Adds a stage of a `kind` ("compiling", "measuring") and returns its index; a weight of 0 (a dry run's measuring)
  // adds nothing to the whole.
  std::size_t add_stage(std::string name, double weight, std::string kind = "");
  // Replaces a stage's estimate once its real size is known (e.g. the instantiations to compile). The first time, the
  // estimates of the stages of its kind still unknown are scaled by the same ratio: what --param or a budget cut from
  // one family it likely cut from the next.
  void set_weight(std::size_t stage, double weight);
  // `done` of `total` units of a stage are done; total 0 means the stage has nothing to do (it is complete).
  void set_progress(std::size_t stage, std::size_t done, std::size_t total);
  void finish(std::size_t stage) { set_progress(stage, 0, 0); }

  std::size_t size() const { return stages_.size(); }
  const std::string& name(std::size_t stage) const { return stages_.at(stage).name; }
  // The weighted share of the run that is done, in [0, 1]; 1 for a plan of no work.
  double fraction() const;
  // Seconds left if the rest goes at the pace so far: elapsed * (1 - f) / f. NaN while nothing is done.
  double eta_seconds(double elapsed_seconds) const;

 private:
  struct Stage {
    std::string name;
    double weight = 0;
    std::string kind;
    bool known = false;  // weight is the real size, not an estimate
    double done = 0;     // share of the stage, [0, 1]
  };
  std::vector<Stage> stages_;
};

// Estimated seconds per problem of a family's two phases, the weights of its WorkPlan stages before their sizes are
// known: `candidates` instantiations compiled on `threads` threads, and the evaluations measured (a `share` of the
// candidates, each taking about its time budget).
struct PhaseEstimate {
  double compile_seconds = 0;
  double measure_seconds = 0;
};
PhaseEstimate estimate_problem_work(std::size_t candidates, std::size_t threads, double evaluated_share, double time_budget_s,
                                    bool dry_run);
// Seconds one instantiation takes to compile on one thread, and what an evaluation costs beyond its time budget
// (load, verify, cool down): the constants behind estimate_problem_work, also used once real counts are known.
inline constexpr double kCompileSecondsPerInstantiation = 1.5;
inline constexpr double kEvaluationOverheadSeconds = 0.1;

class ConsoleProgress final : public TuneObserver {
 public:
  // `interactive`: redraw a bar with carriage returns (stderr is a TTY); else plain lines.
  ConsoleProgress(std::ostream& out, bool interactive);
  ~ConsoleProgress() override;

  // The stages of the whole run (one bar over all of them); without a plan each phase is one stage of its own.
  void set_plan(WorkPlan plan, std::size_t threads, double time_budget_s);
  // The stages the next run_tune's compile and measuring phases report to (indices into the plan).
  void start_stages(std::size_t compile_stage, std::size_t measure_stage);
  // The current stages are over, whatever their counts said (a budget, a skip or nothing to compile ends them early).
  void end_stages();
  const WorkPlan& plan() const { return plan_; }

  void compile_progress(std::size_t done, std::size_t total) override;
  void compile_seconds_each(double seconds) override;
  void measuring_started(std::size_t problems, std::size_t expected_evaluations) override;
  void problem_started(const ProblemReport& report) override;
  void evaluated(const EvaluationEvent& event) override;
  void problem_finished(const ProblemReport& report) override;
  void note(const std::string& message) override;
  // A stage counted in whole problems (the MoE expert GEMMs after the dense families): `done` of `total` finished;
  // prints "[done/total] line; run P%, ETA ..." (the bar's share and ETA cover the whole run).
  void problem_line(std::size_t stage, std::size_t done, std::size_t total, const std::string& line);

  // "1h02m", "3m05s", "12s"; "?" when unknown.
  static std::string format_duration(double seconds);
  // The one-line summary of a finished problem (also what the non-interactive mode prints).
  static std::string describe(const ProblemReport& report);

 private:
  using Clock = std::chrono::steady_clock;
  void draw_bar();
  void clear_bar();
  // The stage of a phase, added to the plan when no plan named one.
  std::size_t stage_for(std::size_t& stage, const std::string& name);
  // "run 37%, ETA 2m05s": the whole run's share done and time left.
  std::string run_text() const;

  static constexpr std::size_t kNoStage = static_cast<std::size_t>(-1);

  std::ostream& out_;
  bool interactive_;
  WorkPlan plan_;
  std::size_t threads_ = 1;
  double time_budget_s_ = 1;
  std::size_t compile_stage_ = kNoStage;
  std::size_t measure_stage_ = kNoStage;
  Clock::time_point run_start_;
  bool bar_shown_ = false;
  bool measuring_ = false;
  Clock::time_point compile_start_;
  std::size_t last_compile_percent_ = 101;
  double compile_seconds_each_ = kCompileSecondsPerInstantiation;
  std::size_t problems_ = 0;
  std::size_t problems_done_ = 0;
  std::size_t expected_ = 0;
  std::size_t done_ = 0;
  std::string best_text_;  // best so far of the problem last evaluated
  std::map<std::string, std::pair<double, std::string>> best_by_problem_;
  Clock::time_point last_draw_;
};

}  // namespace qtune::tune
