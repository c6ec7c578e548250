#include "transfer/crc32c.h"

#include <array>
#include <cstring>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace kvgate::transfer {
namespace {

#if !defined(__SSE4_2__)
constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kTable = MakeTable();
#endif

}  // namespace

uint32_t Crc32c(uint32_t crc, const void* data, size_t length) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
#if defined(__SSE4_2__)
  uint64_t c64 = c;
  while (length >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // Unaligned-safe load.
    c64 = _mm_crc32_u64(c64, word);
    p += 8;
    length -= 8;
  }
  c = static_cast<uint32_t>(c64);
  while (length-- > 0) c = _mm_crc32_u8(c, *p++);
#else
  while (length-- > 0) c = kTable[(c ^ *p++) & 0xFF] ^ (c >> 8);
#endif
  return ~c;
}

}  // namespace kvgate::transfer
