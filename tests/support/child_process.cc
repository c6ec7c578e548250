// File: tests/support/child_process.cc
#include "tests/support/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "gtest/gtest.h"
#include "tests/support/temp_files.h"
#include "tests/support/test_util.h"

extern char** environ;

namespace kvgate::testing {
namespace {

int ExitCode(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

pid_t SpawnChild(std::vector<std::string> args, const ChildStdio& stdio) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (stdio.stdin_fd >= 0) posix_spawn_file_actions_adddup2(&fa, stdio.stdin_fd, 0);
  if (stdio.stdout_fd >= 0) posix_spawn_file_actions_adddup2(&fa, stdio.stdout_fd, 1);
  if (!stdio.log_path.empty()) {
    const int flags = O_WRONLY | O_CREAT | O_APPEND;
    if (stdio.stdout_fd < 0) {
      posix_spawn_file_actions_addopen(&fa, 1, stdio.log_path.c_str(), flags, 0644);
    }
    posix_spawn_file_actions_addopen(&fa, 2, stdio.log_path.c_str(), flags, 0644);
  }
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

int ReapChild(pid_t pid, bool block) {
  int status = 0;
  if (waitpid(pid, &status, block ? 0 : WNOHANG) != pid) return -1;
  return ExitCode(status);
}

int RunInChild(const std::function<int()>& body) {
  const pid_t child = ::fork();
  if (child < 0) return -1;
  if (child == 0) ::_exit(body());
  return ReapChild(child);
}

ChildProcess::ChildProcess(std::vector<std::string> args) {
  log_ = WriteTempFile("process.log", "");
  const std::string binary = args.empty() ? "" : args[0];
  ChildStdio stdio;
  stdio.log_path = log_;
  pid_ = SpawnChild(std::move(args), stdio);
  EXPECT_GT(pid_, 0) << "cannot start " << binary;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    Wait();
  }
}

uint16_t ChildProcess::Port() const {
  uint16_t port = 0;
  WaitFor([&] {
    std::smatch m;
    const std::string text = Log();
    if (std::regex_search(text, m, std::regex("listening on [^ ]+:([0-9]+) "))) {
      port = static_cast<uint16_t>(std::stoi(m[1]));
    }
    return port != 0;
  });
  return port;
}

void ChildProcess::Signal(int sig) const {
  if (pid_ > 0) kill(pid_, sig);
}

int ChildProcess::Wait() {
  if (pid_ <= 0) return -1;
  const int code = ReapChild(pid_);
  pid_ = -1;
  return code;
}

bool ChildProcess::Exited(int* code) {
  if (pid_ <= 0) return false;
  const int c = ReapChild(pid_, /*block=*/false);
  if (c < 0) return false;
  pid_ = -1;
  *code = c;
  return true;
}

uint64_t ChildProcess::RssBytes() const { return ProcessRssBytes(pid_); }

std::string ChildProcess::Log() const {
  std::ifstream in(log_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace kvgate::testing
