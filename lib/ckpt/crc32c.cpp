// CRC32C (Castagnoli): reflected polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF (the
// iSCSI / ext4 / RocksDB checksum; crc32c("123456789") = 0xE3069283). The `crc` argument is a previous
// result, so calls chain over consecutive buffers.
//   hardware: SSE4.2 crc32 instruction, 8 bytes per instruction (selected at run time), on three independent streams
//             at once (the instruction's latency is three times its issue interval), merged by the operator that
//             appends a stream's length of zero bytes (GF(2) matrix powers, as in Mark Adler's crc32c.c);
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
namespace {

// The three streams of the hardware path: blocks of kLong bytes while 3 x kLong remain, then of kShort.
constexpr size_t kLong = 8192, kShort = 256;

// gf2 32x32 matrices as 32 columns: mat * vec over GF(2).
constexpr uint32_t gf2_times(const uint32_t* mat, uint32_t vec) {
  uint32_t sum = 0;
  for (; vec != 0; vec >>= 1, ++mat)
    if (vec & 1u) sum ^= *mat;
  return sum;
}
constexpr void gf2_square(uint32_t* square, const uint32_t* mat) {
  for (int n = 0; n < 32; ++n) square[n] = gf2_times(mat, mat[n]);
}

// Tables that move a CRC register across `len` zero bytes (len a power of two): shift(crc) = the register after
// feeding len zeros, one lookup per byte of the register.
struct ZerosTable {
  uint32_t t[4][256];
  constexpr explicit ZerosTable(size_t len) : t{} {
    uint32_t odd[32] = {}, even[32] = {};
    odd[0] = kPoly;  // the operator for one zero bit
    for (int n = 1; n < 32; ++n) odd[n] = 1u << (n - 1);
    gf2_square(even, odd);  // two zero bits
    gf2_square(odd, even);  // four
    const uint32_t* op = nullptr;
    for (;;) {  // each square doubles: 8 bits (one byte), 2 bytes, ... until len is reached
      gf2_square(even, odd);
      len >>= 1;
      if (len == 0) {
        op = even;
        break;
      }
      gf2_square(odd, even);
      len >>= 1;
      if (len == 0) {
        op = odd;
        break;
      }
    }
    for (uint32_t n = 0; n < 256; ++n)
      for (int b = 0; b < 4; ++b) t[b][n] = gf2_times(op, n << (8 * b));
  }
  uint32_t shift(uint32_t crc) const {
    return t[0][crc & 0xFFu] ^ t[1][(crc >> 8) & 0xFFu] ^ t[2][(crc >> 16) & 0xFFu] ^ t[3][crc >> 24];
  }
};
constexpr ZerosTable kLongZeros(kLong), kShortZeros(kShort);

// Three streams of `block` bytes each from p, merged into the register c: c fed with all 3 x block bytes.
__attribute__((target("sse4.2"))) inline uint64_t crc32c_3way(uint64_t c, const unsigned char* p, size_t block,
                                                              const ZerosTable& zeros) {
  uint64_t c1 = 0, c2 = 0;
  for (size_t i = 0; i < block; i += 8) {
    uint64_t w0, w1, w2;
    std::memcpy(&w0, p + i, 8);
    std::memcpy(&w1, p + block + i, 8);
    std::memcpy(&w2, p + 2 * block + i, 8);
    c = _mm_crc32_u64(c, w0);
    c1 = _mm_crc32_u64(c1, w1);
    c2 = _mm_crc32_u64(c2, w2);
  }
  c = zeros.shift(static_cast<uint32_t>(c)) ^ c1;
  return zeros.shift(static_cast<uint32_t>(c)) ^ c2;
}

}  // namespace

__attribute__((target("sse4.2"))) uint32_t crc32c_hw(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t c = ~crc;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7u) != 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --n;
  }
  for (; n >= 3 * kLong; p += 3 * kLong, n -= 3 * kLong) c = crc32c_3way(c, p, kLong, kLongZeros);
  for (; n >= 3 * kShort; p += 3 * kShort, n -= 3 * kShort) c = crc32c_3way(c, p, kShort, kShortZeros);
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
