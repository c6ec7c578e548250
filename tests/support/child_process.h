// File: tests/support/child_process.h
// Processes a test starts: a binary under test run as a child, its stdout and stderr captured
// to a temp file (ChildProcess); the spawn and reap beneath it, for a child that talks over
// pipes instead (tests/transfer's peer); and a forked copy of the test for a check that must
// change the process itself (its user, say). Thread-compatible.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kvgate::testing {

/// Where a spawned child's standard streams go; -1 or "": inherited from the test.
struct ChildStdio {
  int stdin_fd = -1;
  int stdout_fd = -1;
  std::string log_path;  // stdout (unless stdout_fd is set) and stderr are appended here
};

/// Starts `args[0]` with `args`; its pid, or -1 when it could not be spawned.
pid_t SpawnChild(std::vector<std::string> args, const ChildStdio& stdio = {});

/// Reaps child `pid`: its exit code, or 128 + the signal that ended it. With `block` false,
/// -1 while it still runs.
int ReapChild(pid_t pid, bool block = true);

/// Runs `body` in a forked copy of this process and returns the copy's exit code (`body`'s
/// return value), or 128 + signal. Only async-signal-safe work belongs in `body` when the test
/// runs threads.
int RunInChild(const std::function<int()>& body);

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
  /// What the process wrote to stdout and stderr so far.
  std::string Log() const;
  /// Where that is kept.
  const std::string& log_path() const { return log_; }
  pid_t pid() const { return pid_; }
  /// Resident set size of the process in bytes (VmRSS), 0 when unknown.
  uint64_t RssBytes() const;

 private:
  pid_t pid_ = -1;
  std::string log_;
};

}  // namespace kvgate::testing
