#include "core/rng.hpp"

#include <cmath>

namespace hpct::rng {

namespace {
constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;

inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}
}  // namespace

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c[0], hi0, lo0);
    mulhilo(kMul1, c[2], hi1, lo1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kWeyl0;
    k[1] += kWeyl1;
  }
  return c;
}

std::array<uint32_t, 4> block(uint64_t seed, uint64_t stream, uint64_t index) {
  return philox4x32({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), static_cast<uint32_t>(stream),
                     static_cast<uint32_t>(stream >> 32)},
                    {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}

namespace {
inline double to_unit(uint32_t hi, uint32_t lo) {  // 53 bits -> [0, 1)
  const uint64_t bits = ((static_cast<uint64_t>(hi) << 32) | lo) >> 11;
  return static_cast<double>(bits) * 0x1.0p-53;
}
}  // namespace

double uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  const auto r = block(seed, stream, index);
  return to_unit(r[0], r[1]);
}

uint64_t uniform_int(uint64_t seed, uint64_t stream, uint64_t index, uint64_t n) {
  const auto r = block(seed, stream, index);
  const uint64_t x = (static_cast<uint64_t>(r[2]) << 32) | r[3];
  return static_cast<uint64_t>((static_cast<unsigned __int128>(x) * n) >> 64);
}

double normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const auto r = block(seed, stream, index);
  const double u1 = 1.0 - to_unit(r[0], r[1]);  // (0, 1]: log is finite
  const double u2 = to_unit(r[2], r[3]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2);
}

void fill_normal(float* out, int64_t n, float mean, float stddev, uint64_t seed, uint64_t stream,
                 uint64_t first_index) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    out[i] = static_cast<float>(mean + stddev * normal(seed, stream, first_index + static_cast<uint64_t>(i)));
}

}  // namespace hpct::rng
