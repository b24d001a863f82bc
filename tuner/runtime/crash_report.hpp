#pragma once
// A last word before a fatal signal: which signal, and the call stack as (module, offset) pairs that
// `addr2line -e MODULE OFFSET` turns into source lines. The process then dies by the same signal, so exit codes and
// the worker's containment see what they saw before.

namespace qtune::runtime {

// Installs the handler for SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGABRT (idempotent). `program` names the process
// in the report ("qtune", "qtune worker").
void install_crash_report(const char* program);

}  // namespace qtune::runtime
