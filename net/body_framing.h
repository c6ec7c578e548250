// File: net/body_framing.h
// Finds where an HTTP/1.1 message body ends while its bytes stream past: a Content-Length
// countdown, a close-delimited body, or an incremental parser of the chunked coding (chunk
// sizes, extensions, zero-length last chunk, trailer section; RFC 9112 §7.1). Fed the bytes
// in whatever pieces the network delivers, it reports the payload (chunk data) inside them,
// so that the relay can forward the framed bytes as they are and feed the usage scanner, or
// de-chunk, in the same pass. Strict: CRLF line endings, at most 16 hex digits, bounded
// extension and trailer lines. Thread-compatible; one per message.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "net/http1.h"

namespace kvgate::router::http1 {

class BodyFraming {
 public:
  enum class Status : uint8_t { kMore, kDone, kError };

  /// A body of `kind` (`length` bytes for kLength). kNone is done at once.
  BodyFraming(BodyKind kind, uint64_t length);

  /// Reads `in` until the message ends or `in` is exhausted: `*consumed` bytes of `in` belong
  /// to this body (fewer than in.size() only when it ended or failed), `on_data` gets each run
  /// of payload bytes among them in order (views into `in`). kDone: the body ended exactly
  /// after `*consumed` bytes; kError: malformed framing (see error()), `*consumed` is how far
  /// it was valid.
  Status Feed(std::string_view in, size_t* consumed,
              absl::FunctionRef<void(std::string_view)> on_data);

  /// The connection closed: a close-delimited body ends here, any other is truncated.
  Status OnEof();

  bool done() const { return state_ == State::kDone; }
  BodyKind kind() const { return kind_; }
  const std::string& error() const { return error_; }
  /// Payload bytes seen so far (chunk data, or the body itself).
  uint64_t payload_bytes() const { return payload_bytes_; }

 private:
  enum class State : uint8_t {
    kSize,       // hex digits of a chunk size
    kExtension,  // after the size: ";name=value" up to CR
    kSizeLf,     // CR seen after the size line
    kData,       // chunk data, remaining_ bytes left
    kDataCr,     // CRLF after chunk data
    kDataLf,
    kTrailer,  // start of a trailer line (an empty one ends the message)
    kTrailerLine,
    kTrailerLf,   // CR seen at the end of a non-empty trailer line
    kLastLf,      // CR of the final empty line seen
    kLength,      // Content-Length body
    kUntilClose,  // close-delimited body
    kDone,
    kError,
  };

  Status Fail(std::string message);

  static constexpr size_t kMaxLineBytes = 4096;      // a chunk-size line with its extensions
  static constexpr size_t kMaxTrailerBytes = 16384;  // the whole trailer section

  const BodyKind kind_;
  State state_;
  uint64_t remaining_ = 0;
  int size_digits_ = 0;
  size_t line_bytes_ = 0;
  size_t trailer_bytes_ = 0;
  uint64_t payload_bytes_ = 0;
  std::string error_;
};

}  // namespace kvgate::router::http1
