// CRC32C (Castagnoli): reflected polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF (the
// iSCSI / ext4 / RocksDB checksum; crc32c("123456789") = 0xE3069283). The `crc` argument is a previous
// result, so calls chain over consecutive buffers.
//   hardware: SSE4.2 crc32 instruction, 8 bytes per instruction (selected at run time);
//   software: slicing-by-8 tables (8 bytes per step, 8 table lookups).
#include <cstring>

#include "ckpt/checkpoint.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HPCT_CRC32C_X86 1
#endif

namespace hpct::ckpt {

namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

struct Tables {
  uint32_t t[8][256];
  constexpr Tables() : t{} {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ kPoly : c >> 1;
      t[0][i] = c;
    }
    // t[j][i]: the CRC of byte i followed by j zero bytes.
    for (uint32_t i = 0; i < 256; ++i)
      for (int j = 1; j < 8; ++j) t[j][i] = (t[j - 1][i] >> 8) ^ t[0][t[j - 1][i] & 0xFFu];
  }
};
constexpr Tables kTables{};

}  // namespace

uint32_t crc32c_sw(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  const auto& t = kTables.t;
  uint32_t c = ~crc;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7u) != 0) {
    c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFFu];
    --n;
  }
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);  // little-endian: byte 0 is the low byte
    w ^= c;
    c = t[7][w & 0xFF] ^ t[6][(w >> 8) & 0xFF] ^ t[5][(w >> 16) & 0xFF] ^ t[4][(w >> 24) & 0xFF] ^
        t[3][(w >> 32) & 0xFF] ^ t[2][(w >> 40) & 0xFF] ^ t[1][(w >> 48) & 0xFF] ^ t[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFFu];
  return ~c;
}

#ifdef HPCT_CRC32C_X86
__attribute__((target("sse4.2"))) uint32_t crc32c_hw(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t c = ~crc;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7u) != 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --n;
  }
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
  return ~static_cast<uint32_t>(c);
}

bool crc32c_hw_available() {
  static const bool ok = __builtin_cpu_supports("sse4.2");
  return ok;
}
#else
uint32_t crc32c_hw(const void* data, size_t n, uint32_t crc) { return crc32c_sw(data, n, crc); }
bool crc32c_hw_available() { return false; }
#endif

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  return crc32c_hw_available() ? crc32c_hw(data, n, crc) : crc32c_sw(data, n, crc);
}

}  // namespace hpct::ckpt
