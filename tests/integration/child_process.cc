#include "tests/integration/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "gtest/gtest.h"
#include "tests/integration/test_util.h"

extern char** environ;

namespace kvgate::testing {
namespace {

int ExitCode(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

ChildProcess::ChildProcess(std::vector<std::string> args) {
  log_ = WriteTempFile("process.log", "");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log_.c_str(), O_WRONLY | O_APPEND, 0);
  posix_spawn_file_actions_addopen(&fa, 2, log_.c_str(), O_WRONLY | O_APPEND, 0);
  EXPECT_EQ(posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ), 0) << argv[0];
  posix_spawn_file_actions_destroy(&fa);
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

void ChildProcess::Signal(int sig) const { kill(pid_, sig); }

int ChildProcess::Wait() {
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return ExitCode(status);
}

bool ChildProcess::Exited(int* code) {
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
  pid_ = -1;
  *code = ExitCode(status);
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
