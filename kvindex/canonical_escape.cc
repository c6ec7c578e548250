// File: kvindex/canonical_escape.cc
// AppendEscaped (canonicalize.h): a message's text into the canonical stream, its framing bytes
// escaped. Most text has none, so the scan skips 64, then 16, then 8 bytes at a time.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "kvindex/canonicalize.h"

namespace kvgate::kvindex {
namespace {

// True if any byte of the 8-byte word is < 9 (i.e. a framing byte).
bool HasFramingByte(uint64_t x) {
  constexpr uint64_t kOnes = 0x0101010101010101ULL;
  constexpr uint64_t kHigh = 0x8080808080808080ULL;
  return ((x - kOnes * (canonical::kMaxFramingByte + 1)) & ~x & kHigh) != 0;
}

}  // namespace

void AppendEscaped(std::string_view text, std::string* out) {
  const char* p = text.data();
  const char* end = p + text.size();
  const char* run = p;  // Start of the pending unescaped run.
  while (p < end) {
#if defined(__SSE2__)
    // A byte is a framing byte when min(byte, kMaxFramingByte) == byte. 64 bytes at a time
    // while none is (a message's text mostly): one test of the four vectors' bytewise minimum.
    const __m128i limit = _mm_set1_epi8(static_cast<char>(canonical::kMaxFramingByte));
    if (end - p >= 64) {
      const auto* v = reinterpret_cast<const __m128i*>(p);
      const __m128i low =
          _mm_min_epu8(_mm_min_epu8(_mm_loadu_si128(v), _mm_loadu_si128(v + 1)),
                       _mm_min_epu8(_mm_loadu_si128(v + 2), _mm_loadu_si128(v + 3)));
      if (_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_min_epu8(low, limit), low)) == 0) {
        p += 64;
        continue;
      }
    }
    if (end - p >= 16) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      if (_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_min_epu8(v, limit), v)) == 0) {
        p += 16;
        continue;
      }
    }
#endif
    if (end - p >= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      if (!HasFramingByte(w)) {
        p += 8;
        continue;
      }
    }
    const unsigned char c = static_cast<unsigned char>(*p);
    if (c <= canonical::kMaxFramingByte) {
      out->append(run, p - run);
      out->push_back(canonical::kEscape);
      out->push_back(static_cast<char>(c | 0x40));
      run = p + 1;
    }
    ++p;
  }
  out->append(run, end - run);
}

}  // namespace kvgate::kvindex
