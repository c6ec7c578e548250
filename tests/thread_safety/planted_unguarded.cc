// File: tests/thread_safety/planted_unguarded.cc
// check.py's proof that it can fail: clean as written; with -DPLANT_BUG it reads a guarded
// member without its lock, which clang's -Wthread-safety must report. Never linked.
#include "common/mutex.h"

namespace kvgate::common {

class Counter {
 public:
  void Add() {
    MutexLock lock(&mu_);
    ++n_;
  }
  int Read() {
#ifdef PLANT_BUG
    return n_;
#else
    MutexLock lock(&mu_);
    return n_;
#endif
  }

 private:
  Mutex mu_;
  int n_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvgate::common
