#include "net/body_framing.h"

#include <algorithm>

#include "common/strings.h"

namespace kvgate::router::http1 {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

BodyFraming::BodyFraming(BodyKind kind, uint64_t length) : kind_(kind) {
  switch (kind) {
    case BodyKind::kNone:
      state_ = State::kDone;
      break;
    case BodyKind::kLength:
      remaining_ = length;
      state_ = length == 0 ? State::kDone : State::kLength;
      break;
    case BodyKind::kChunked:
      state_ = State::kSize;
      break;
    case BodyKind::kUntilClose:
      state_ = State::kUntilClose;
      break;
  }
}

BodyFraming::Status BodyFraming::Fail(std::string message) {
  state_ = State::kError;
  error_ = std::move(message);
  return Status::kError;
}

BodyFraming::Status BodyFraming::OnEof() {
  if (state_ == State::kUntilClose) {
    state_ = State::kDone;
    return Status::kDone;
  }
  if (state_ == State::kDone) return Status::kDone;
  if (state_ == State::kError) return Status::kError;
  return Fail(kind_ == BodyKind::kLength ? common::StrCat("connection closed with ", remaining_,
                                                          " bytes of the body missing")
                                         : std::string("connection closed before the last chunk"));
}

BodyFraming::Status BodyFraming::Feed(std::string_view in, size_t* consumed,
                                      absl::FunctionRef<void(std::string_view)> on_data) {
  size_t pos = 0;
  const size_t n = in.size();
  auto data_run = [&](uint64_t limit) {
    const size_t take = static_cast<size_t>(std::min<uint64_t>(limit, n - pos));
    if (take > 0) on_data(in.substr(pos, take));
    payload_bytes_ += take;
    pos += take;
    return take;
  };
  while (pos < n) {
    switch (state_) {
      case State::kDone:
        *consumed = pos;
        return Status::kDone;
      case State::kError:
        *consumed = pos;
        return Status::kError;
      case State::kUntilClose:
        data_run(n - pos);
        break;
      case State::kLength:
        remaining_ -= data_run(remaining_);
        if (remaining_ == 0) state_ = State::kDone;
        break;
      case State::kData:
        remaining_ -= data_run(remaining_);
        if (remaining_ == 0) state_ = State::kDataCr;
        break;
      case State::kSize: {
        const char c = in[pos];
        const int v = HexValue(c);
        if (v >= 0) {
          if (++size_digits_ > 16) {
            *consumed = pos;
            return Fail("chunk size has more than 16 hex digits");
          }
          remaining_ = (remaining_ << 4) | static_cast<uint64_t>(v);
          ++line_bytes_;
          ++pos;
          break;
        }
        if (size_digits_ == 0) {
          *consumed = pos;
          return Fail("chunk size expected");
        }
        if (c == ';' || c == ' ' || c == '\t') {
          state_ = State::kExtension;
        } else if (c == '\r') {
          state_ = State::kSizeLf;
          ++pos;
        } else {
          *consumed = pos;
          return Fail("invalid byte in a chunk size");
        }
        break;
      }
      case State::kExtension: {
        const char c = in[pos];
        if (c == '\r') {
          state_ = State::kSizeLf;
        } else if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f) {
          *consumed = pos;
          return Fail("invalid byte in a chunk extension");
        } else if (++line_bytes_ > kMaxLineBytes) {
          *consumed = pos;
          return Fail("chunk extension too long");
        }
        ++pos;
        break;
      }
      case State::kSizeLf:
        if (in[pos] != '\n') {
          *consumed = pos;
          return Fail("chunk size line not ended by CRLF");
        }
        ++pos;
        size_digits_ = 0;
        line_bytes_ = 0;
        state_ = remaining_ == 0 ? State::kTrailer : State::kData;
        break;
      case State::kDataCr:
        if (in[pos] != '\r') {
          *consumed = pos;
          return Fail("chunk data not followed by CRLF");
        }
        ++pos;
        state_ = State::kDataLf;
        break;
      case State::kDataLf:
        if (in[pos] != '\n') {
          *consumed = pos;
          return Fail("chunk data not followed by CRLF");
        }
        ++pos;
        state_ = State::kSize;
        break;
      case State::kTrailer:
        if (in[pos] == '\r') {
          state_ = State::kLastLf;
          ++pos;
          break;
        }
        state_ = State::kTrailerLine;
        break;
      case State::kTrailerLine: {
        const char c = in[pos];
        if (c == '\r') {
          state_ = State::kTrailerLf;
        } else if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f) {
          *consumed = pos;
          return Fail("invalid byte in a trailer field");
        } else if (++trailer_bytes_ > kMaxTrailerBytes) {
          *consumed = pos;
          return Fail("trailer section too long");
        }
        ++pos;
        break;
      }
      case State::kTrailerLf:
        if (in[pos] != '\n') {
          *consumed = pos;
          return Fail("trailer line not ended by CRLF");
        }
        ++pos;
        state_ = State::kTrailer;
        break;
      case State::kLastLf:
        if (in[pos] != '\n') {
          *consumed = pos;
          return Fail("chunked body not ended by CRLF");
        }
        ++pos;
        state_ = State::kDone;
        break;
    }
  }
  *consumed = pos;
  if (state_ == State::kDone) return Status::kDone;
  if (state_ == State::kError) return Status::kError;
  return Status::kMore;
}

}  // namespace kvgate::router::http1
