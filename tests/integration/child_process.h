// File: tests/integration/child_process.h
// A binary under test run as a child process, its stdout and stderr captured to a temp file.
// Thread-compatible.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kvgate::testing {

class ChildProcess {
 public:
  /// Starts `args[0]` with `args`; the test fails if it cannot be spawned.
  explicit ChildProcess(std::vector<std::string> args);
  /// Kills the process (SIGKILL) if it still runs.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  /// The port of the "listening on HOST:PORT " line kvgate logs; 0 if it never came.
  uint16_t Port() const;
  void Signal(int sig) const;
  /// Waits for exit; the exit code, or 128 + signal.
  int Wait();
  /// Non-blocking: true and `*code` once the process exited.
  bool Exited(int* code);
  std::string Log() const;
  pid_t pid() const { return pid_; }
  /// Resident set size of the process in bytes (VmRSS), 0 when unknown.
  uint64_t RssBytes() const;

 private:
  pid_t pid_ = -1;
  std::string log_;
};

}  // namespace kvgate::testing
