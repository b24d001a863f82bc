#include "tuner/runtime/crash_report.hpp"

#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>

namespace qtune::runtime {

namespace {

const char* g_program = "qtune";
std::atomic<bool> g_installed{false};

// Only write(2) and fixed buffers below: the heap may be what broke.
void write_text(const char* text) {
  size_t length = std::strlen(text);
  while (length > 0) {
    const ssize_t written = ::write(STDERR_FILENO, text, length);
    if (written <= 0) return;
    text += written;
    length -= static_cast<size_t>(written);
  }
}

void write_hex(uintptr_t value) {
  char buffer[2 + 16 + 1];
  buffer[0] = '0';
  buffer[1] = 'x';
  int digits = 0;
  uintptr_t probe = value;
  do {
    ++digits;
    probe >>= 4;
  } while (probe != 0);
  for (int i = digits - 1; i >= 0; --i) {
    const unsigned nibble = static_cast<unsigned>(value & 0xF);
    buffer[2 + i] = static_cast<char>(nibble < 10 ? '0' + nibble : 'a' + nibble - 10);
    value >>= 4;
  }
  buffer[2 + digits] = '\0';
  write_text(buffer);
}

void write_decimal(int value) {
  char buffer[16];
  int position = 15;
  buffer[position] = '\0';
  const bool negative = value < 0;
  unsigned magnitude = negative ? static_cast<unsigned>(-static_cast<long>(value)) : static_cast<unsigned>(value);
  do {
    buffer[--position] = static_cast<char>('0' + magnitude % 10);
    magnitude /= 10;
  } while (magnitude != 0 && position > 1);
  if (negative) buffer[--position] = '-';
  write_text(buffer + position);
}

void on_fatal_signal(int signal_number) {
  write_text("\n");
  write_text(g_program);
  write_text(": fatal signal ");
  write_decimal(signal_number);
  write_text(" (");
  write_text(strsignal(signal_number));
  write_text("); call stack as module+offset (addr2line -e MODULE OFFSET):\n");
  void* frames[64];
  const int count = backtrace(frames, 64);
  for (int i = 0; i < count; ++i) {
    Dl_info info{};
    const uintptr_t address = reinterpret_cast<uintptr_t>(frames[i]);
    write_text("  #");
    write_decimal(i);
    write_text(" ");
    if (dladdr(frames[i], &info) != 0 && info.dli_fname != nullptr) {
      write_text(info.dli_fname);
      write_text("+");
      write_hex(address - reinterpret_cast<uintptr_t>(info.dli_fbase));
      if (info.dli_sname != nullptr) {
        write_text(" ");
        write_text(info.dli_sname);
      }
    } else {
      write_hex(address);
    }
    write_text("\n");
  }
  // Die by the same signal, with the default action, so the parent sees the true cause.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(signal_number, &default_action, nullptr);
  raise(signal_number);
}

}  // namespace

void install_crash_report(const char* program) {
  if (g_installed.exchange(true)) return;
  g_program = program;
  void* warm_up[1];
  backtrace(warm_up, 1);  // loads libgcc's unwinder now, not inside the handler
  struct sigaction action {};
  action.sa_handler = on_fatal_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;
  for (int signal_number : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) sigaction(signal_number, &action, nullptr);
}

}  // namespace qtune::runtime
