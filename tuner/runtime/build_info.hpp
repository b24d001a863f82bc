#pragma once
// What this build of qtune is, stamped into every run it stores.
namespace qtune {

// The commit the binaries were built from, read from git at build time (not when CMake configured): 12 hex digits,
// "-dirty" when tracked files had uncommitted changes, "unknown" outside a git checkout.
const char* build_git_sha();

}  // namespace qtune
