// File: transfer/crc32c.h
// CRC32C (Castagnoli), used to verify slices end to end when TransferEngine's verify_crc32c is
// on. SSE4.2 instructions on x86-64 (the build sets -msse4.2), a table elsewhere. Stateless;
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvgate::transfer {

/// Extends `crc` (0 to start) over `data`. Crc32c(0, "123456789", 9) == 0xE3069283.
uint32_t Crc32c(uint32_t crc, const void* data, size_t length);

}  // namespace kvgate::transfer
