#pragma once
// The MoE part of an exported selection table (selection_table.hpp's MoeRules): the store's MoE winners of one GPU
// (db/moe_store.hpp), per (format, experts, top_k, n, k, projection, layout), compacted into token ranges.
#include <string>
#include <vector>

#include "db/moe_store.hpp"
#include "reports/selection_table.hpp"

namespace qtune::reports {

// Fills table.moe from the MoE winners of `gpu` (only `formats`, canonical texts, unless empty). A key tuned with several routings takes
// the uniform one when it has it, else the first in text order (a table holds one routing per key). A file older
// than schema version 4 has none.
void add_moe_rules(SelectionTable& table, db::Store& store, const std::string& gpu,
                   const std::vector<std::string>& formats = {});

}  // namespace qtune::reports
