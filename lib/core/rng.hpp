#pragma once
// Counter-based RNG: Philox4x32-10 (Salmon et al., SC'11; the generator of cuRAND and PyTorch's CUDA RNG).
// Every random number hpctrain draws is a pure function of (seed, stream, index): parameters use
// stream = hash(parameter name) and index = logical element index, so a tensor-parallel shard draws
// exactly the values the serial model holds (docs/invariants.md, invariant 1). No state, nothing global.
// All arithmetic is integer or IEEE float/double with correctly rounded operations plus std::log/cos
// in double, so streams do not depend on the layout.
#include <array>
#include <cstdint>
#include <string_view>

namespace hpct::rng {

// FNV-1a 64-bit: the stream id of a name.
constexpr uint64_t stream_of(std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

// One Philox4x32-10 block: counter (4 x 32 bit) and key (2 x 32 bit) -> 4 random 32-bit words.
std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key);

// The block for (seed, stream, index): key = seed, counter = (index lo, index hi, stream lo, stream hi).
std::array<uint32_t, 4> block(uint64_t seed, uint64_t stream, uint64_t index);

// Uniform double in [0, 1) with 53 random bits, from words 0 and 1 of the block.
double uniform(uint64_t seed, uint64_t stream, uint64_t index);
// Uniform integer in [0, n) (n > 0), from the 64-bit value of words 2 and 3 (bias < n / 2^64).
uint64_t uniform_int(uint64_t seed, uint64_t stream, uint64_t index, uint64_t n);
// Standard normal by Box-Muller on the block's words (cosine branch), computed in double.
double normal(uint64_t seed, uint64_t stream, uint64_t index);

// Fills out[i] = mean + stddev * normal(seed, stream, first_index + i), i in [0, n).
void fill_normal(float* out, int64_t n, float mean, float stddev, uint64_t seed, uint64_t stream, uint64_t first_index);

}  // namespace hpct::rng
