// Linked into every test binary (an object library, so the linker cannot drop it).
//
// spdlog's registry lives in libspdlog.so, which is not built with ThreadSanitizer. Its lazy
// singleton is published through an inline guard check TSan cannot see, so when two of a
// test's threads both log first, TSan reports the default logger's construction racing with
// the other thread's level check. Creating the logger during static initialisation, on the
// main thread before any test starts a thread, orders it before every use.
#include <spdlog/spdlog.h>

namespace {
[[maybe_unused]] const auto* const kDefaultLogger = spdlog::default_logger_raw();
}  // namespace
