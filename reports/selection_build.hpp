#pragma once
// Building a selection table from a store's tuning data and measuring its fallback (qtune_reports, which reads the
// database); the table itself, which the production runtime reads without a database, is selection_table.hpp.
#include <map>
#include <string>

#include "reports/selection_table.hpp"
#include "reports/tuning_data.hpp"

namespace qtune::reports {

// The table of one GPU's winners (only formats with winners; dense f16/bf16 problems never have any).
// Throws InputError when the GPU has no winner of the selected formats.
SelectionTable build_selection_table(const TuningData& data, const std::string& gpu);

// Leave-one-shape-out regret of the fallback over the measurements in `gpu_data` (store nothing).
FallbackRegret evaluate_fallback(const SelectionTable& table, const TuningData& data, const GpuData& gpu_data);
// Per format, the fallback with the lower geometric-mean regret in `regret` (nearest shape when neither is measured).
std::map<std::string, FallbackMethod> choose_fallback_methods(const SelectionTable& table, const FallbackRegret& regret);

}  // namespace qtune::reports
