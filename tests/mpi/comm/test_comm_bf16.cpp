// MpiCommunicator with bf16 buffers at np 1, 2, 4 (mpi_communicator.hpp: a 2-byte datatype and user-defined
// operations that widen to fp32, combine and round once to nearest even).
//
// The host reference applies the same rounding. A sum over n ranks is rounded at each of its n - 1 pairwise
// combinations, in an order MPI's algorithm chooses; at np 2 that is exactly round(a + b), and at np 4 the result must
// be the value of one of the 15 ways to combine four operands pairwise (every full binary tree over them, commutative),
// each node rounded: possible_sums() enumerates them. Besides that:
//  - small integers, whose partial sums are all exact in bf16, give exact values for every operation;
//  - ties (1 + 2^-8, 1 + 3 * 2^-8) check round-to-nearest-even, not truncation, whatever the order;
//  - every rank holds the same bits, and the same call twice gives the same bits (reproducible for a fixed size);
//  - data movement (allgather, the _v forms, broadcast, send/recv) carries every 16-bit pattern, NaNs included,
//    unchanged.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/comm.hpp"
#include "core/error.hpp"
#include "tensor/bf16.hpp"

namespace hpct::comm {
namespace {

CommOptions test_options() {
  CommOptions o;
  o.timeout_s = 60;  // a hang fails the test instead of the ctest timeout
  return o;
}

// A deterministic value in about [-4, 4) as bf16, different on every (i, rank): splitmix64 of the pair.
bf16 random_value(int64_t i, int rank) {
  uint64_t z = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull +
               static_cast<uint64_t>(rank + 1) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const float u = static_cast<float>(z >> 40) / static_cast<float>(1ull << 24);  // [0, 1)
  return to_bf16(8.0f * u - 4.0f);
}

// The combination MPI applies: widen, add in fp32, round once.
float add_rounded(float a, float b) { return to_f32(to_bf16(a + b)); }

// Every value a pairwise-rounded sum of v can take (all full binary trees over the operands; the operation commutes).
// results(S) = union over splits S = A | B of { round(a + b) : a in results(A), b in results(B) }, by subset mask.
std::vector<float> possible_sums(const std::vector<float>& v) {
  const int n = static_cast<int>(v.size());
  std::vector<std::vector<float>> res(size_t{1} << n);
  for (int i = 0; i < n; ++i) res[size_t{1} << i] = {v[i]};
  for (unsigned mask = 1; mask < (1u << n); ++mask) {
    if ((mask & (mask - 1)) == 0) continue;  // single operands: above
    std::vector<float>& out = res[mask];
    for (unsigned a = (mask - 1) & mask; a > 0; a = (a - 1) & mask) {
      const unsigned b = mask ^ a;
      if (a < b) continue;  // each unordered split once
      for (float x : res[a])
        for (float y : res[b]) out.push_back(add_rounded(x, y));
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }
  return res[(1u << n) - 1];
}

bool contains(const std::vector<float>& set, float x) { return std::find(set.begin(), set.end(), x) != set.end(); }

std::vector<bf16> random_buffer(int64_t count, int rank, int64_t first_index = 0) {
  std::vector<bf16> b(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) b[i] = random_value(first_index + i, rank);
  return b;
}

// Checks element j of a reduction's result against the host reference over the inputs random_value(global, q) of
// every rank q; returns false (and reports the first few) when it is not a possible result.
class ReductionChecker {
 public:
  ReductionChecker(int n, ReduceOp op, std::string what) : n_(n), op_(op), what_(std::move(what)) {}
  void check(int64_t global, bf16 got) {
    std::vector<float> in(static_cast<size_t>(n_));
    for (int q = 0; q < n_; ++q) in[q] = to_f32(random_value(global, q));
    const float g = to_f32(got);
    std::vector<float> want;
    switch (op_) {
      case ReduceOp::Max:  // exact: one of the operands
        want = {*std::max_element(in.begin(), in.end())};
        break;
      case ReduceOp::Min: want = {*std::min_element(in.begin(), in.end())}; break;
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        want = possible_sums(in);
        if (op_ == ReduceOp::Avg)  // the rounded sum divided in fp32, rounded once more
          for (float& s : want) s = to_f32(to_bf16(s / static_cast<float>(n_)));
        break;
    }
    if (contains(want, g) || wrong_++ >= 3) return;
    std::string list;
    for (float w : want) list += fmt::format(" {}", w);
    ADD_FAILURE() << what_ << ": element " << global << " is " << g << ", should be one of" << list;
  }
  int64_t wrong() const { return wrong_; }

 private:
  int n_;
  ReduceOp op_;
  std::string what_;
  int64_t wrong_ = 0;
};

const std::vector<ReduceOp> kOps = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min};

// Rank 0's bits of buf, as every rank sees them (a raw MPI broadcast of uint16, independent of the code under test).
void expect_same_bits_on_every_rank(const std::vector<bf16>& buf, const std::string& what) {
  std::vector<bf16> root(buf);
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_UINT16_T, 0, MPI_COMM_WORLD);
  int64_t differ = 0;
  for (size_t i = 0; i < buf.size(); ++i) differ += buf[i].bits != root[i].bits;
  EXPECT_EQ(differ, 0) << what << ": elements that differ from rank 0's";
}

TEST(MpiCommunicatorBf16, AllreduceMatchesPairwiseRoundedHostSums) {
  auto comm = make_world_communicator(test_options());
  const int n = comm->size(), r = comm->rank();
  // 100003 elements (195 KiB) take IallreduceAlgorithm's large path (reduce-scatter + allgather), 7 libnbc's tree.
  for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{100003}})
    for (ReduceOp op : kOps) {
      const std::string what = fmt::format("bf16 allreduce {} count {} np {}", reduce_op_name(op), count, n);
      std::vector<bf16> buf = random_buffer(count, r);
      comm->allreduce(buf.data(), count, DType::BF16, op, what);
      ReductionChecker c(n, op, what);
      for (int64_t i = 0; i < count; ++i) c.check(i, buf[i]);
      EXPECT_EQ(c.wrong(), 0) << what;
      expect_same_bits_on_every_rank(buf, what);
      // The same call again: the same bits (reproducible for a fixed communicator size and count).
      std::vector<bf16> again = random_buffer(count, r);
      comm->allreduce(again.data(), count, DType::BF16, op, what + " (repeated)");
      int64_t differ = 0;
      for (int64_t i = 0; i < count; ++i) differ += again[i].bits != buf[i].bits;
      EXPECT_EQ(differ, 0) << what << ": a repeated call gave other bits";
    }
}

TEST(MpiCommunicatorBf16, AllreduceRoundsTiesToEven) {
  auto comm = make_world_communicator(test_options());
  const int n = comm->size(), r = comm->rank();
  if (n == 1) GTEST_SKIP() << "one rank: nothing is combined";
  // Rank 0 holds x, rank 1 2^-8 (half a bf16 ulp of [1, 2)), the others 0: every order adds the two once (x + 0 is
  // exact), so the sum is round(x + 2^-8). 1 + 2^-8 ties down to 1 (even); (1 + 2^-7) + 2^-8 ties up to 1 + 2^-6;
  // truncation would give 1 and 1 + 2^-7, rounding half up 1 + 2^-7 and 1 + 2^-6.
  const float half_ulp = std::ldexp(1.0f, -8);
  std::vector<bf16> buf(2, to_bf16(0.0f));
  if (r == 0) buf = {to_bf16(1.0f), to_bf16(1.0f + 2 * half_ulp)};
  if (r == 1) buf = {to_bf16(half_ulp), to_bf16(half_ulp)};
  comm->allreduce(buf.data(), 2, DType::BF16, ReduceOp::Sum, "ties");
  EXPECT_EQ(to_f32(buf[0]), 1.0f);
  EXPECT_EQ(to_f32(buf[1]), 1.0f + 4 * half_ulp);
}

TEST(MpiCommunicatorBf16, SmallIntegersAreExactForEveryOperation) {
  auto comm = make_world_communicator(test_options());
  const int n = comm->size(), r = comm->rank();
  // (r + 1) * b with b <= 25: every partial sum is an integer <= 250, exact in bf16 (8 significant bits).
  auto base = [](int64_t i) { return static_cast<float>(i % 25 + 1); };
  const int64_t count = 40001;
  for (ReduceOp op : kOps) {
    std::vector<bf16> buf(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) buf[i] = to_bf16(static_cast<float>(r + 1) * base(i));
    comm->allreduce(buf.data(), count, DType::BF16, op, "integers");
    int64_t wrong = 0;
    for (int64_t i = 0; i < count; ++i) {
      const float b = base(i), sum = b * static_cast<float>(n * (n + 1) / 2);
      const float want = op == ReduceOp::Sum   ? sum
                         : op == ReduceOp::Avg ? sum / static_cast<float>(n)  // 1.5 b, 2.5 b: exact too
                         : op == ReduceOp::Max ? b * static_cast<float>(n)
                                               : b;
      if (to_f32(buf[i]) != want && wrong++ < 3)
        ADD_FAILURE() << reduce_op_name(op) << " element " << i << " is " << to_f32(buf[i]) << ", should be " << want;
    }
    EXPECT_EQ(wrong, 0) << reduce_op_name(op) << " np " << n;
  }
}

TEST(MpiCommunicatorBf16, ReduceScatterBlockAndUnevenInAndOutOfPlace) {
  auto comm = make_world_communicator(test_options());
  const int n = comm->size(), r = comm->rank();
  for (bool in_place : {false, true})
    for (ReduceOp op : kOps) {
      {  // equal blocks: rank r receives the reduction of global indices [r count, (r + 1) count)
        const int64_t count = 50001;
        const std::string what = fmt::format("bf16 reduce_scatter{} {} np {}", in_place ? " (in place)" : "",
                                             reduce_op_name(op), n);
        std::vector<bf16> send = random_buffer(count * n, r), recv(static_cast<size_t>(count));
        bf16* out = in_place ? send.data() + r * count : recv.data();
        comm->reduce_scatter(send.data(), out, count, DType::BF16, op, what);
        ReductionChecker c(n, op, what);
        for (int64_t j = 0; j < count; ++j) c.check(r * count + j, out[j]);
        EXPECT_EQ(c.wrong(), 0) << what;
      }
      {  // uneven blocks, rank 1's empty
        std::vector<int64_t> counts(static_cast<size_t>(n));
        for (int q = 0; q < n; ++q) counts[q] = q == 1 ? 0 : 1000 + 7 * q;
        int64_t total = 0, displ = 0;
        for (int q = 0; q < n; ++q) {
          if (q == r) displ = total;
          total += counts[q];
        }
        const std::string what = fmt::format("bf16 reduce_scatter_v{} {} np {}", in_place ? " (in place)" : "",
                                             reduce_op_name(op), n);
        std::vector<bf16> send = random_buffer(total, r), recv(static_cast<size_t>(std::max<int64_t>(counts[r], 1)));
        bf16* out = in_place ? send.data() + displ : recv.data();
        comm->reduce_scatter_v_async(send.data(), out, counts, DType::BF16, op, what)->wait();
        ReductionChecker c(n, op, what);
        for (int64_t j = 0; j < counts[r]; ++j) c.check(displ + j, out[j]);
        EXPECT_EQ(c.wrong(), 0) << what;
      }
    }
}

// Bit pattern k of rank q: walks all 65536 patterns (NaNs, infinities, subnormals) across ranks and elements.
bf16 pattern(int64_t k, int q) { return bf16{static_cast<uint16_t>((k * 7 + q * 13) & 0xffff)}; }

TEST(MpiCommunicatorBf16, DataMovementKeepsEveryBitPattern) {
  auto comm = make_world_communicator(test_options());
  const int n = comm->size(), r = comm->rank();
  const int64_t count = 65536 + 3;
  auto wrong_bits = [](const std::vector<bf16>& got, auto&& want) {
    int64_t wrong = 0;
    for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i) wrong += got[i].bits != want(i).bits;
    return wrong;
  };
  {  // allgather: block q from rank q
    std::vector<bf16> send(static_cast<size_t>(count)), recv(static_cast<size_t>(count * n));
    for (int64_t i = 0; i < count; ++i) send[i] = pattern(i, r);
    comm->allgather(send.data(), recv.data(), count, DType::BF16, "bf16 allgather");
    EXPECT_EQ(wrong_bits(recv, [&](int64_t i) { return pattern(i % count, static_cast<int>(i / count)); }), 0);
  }
  {  // allgather_v in place, uneven
    std::vector<int64_t> counts(static_cast<size_t>(n));
    std::vector<int> owner;
    std::vector<int64_t> local;
    int64_t displ = 0;
    for (int q = 0; q < n; ++q) {
      counts[q] = 300 + 11 * q;
      if (q == r) displ = static_cast<int64_t>(owner.size());
      for (int64_t j = 0; j < counts[q]; ++j) {
        owner.push_back(q);
        local.push_back(j);
      }
    }
    std::vector<bf16> recv(owner.size(), bf16{0});
    for (int64_t j = 0; j < counts[r]; ++j) recv[displ + j] = pattern(j, r);
    comm->allgather_v_async(recv.data() + displ, recv.data(), counts, DType::BF16, "bf16 allgather_v")->wait();
    EXPECT_EQ(wrong_bits(recv, [&](int64_t i) { return pattern(local[i], owner[i]); }), 0);
  }
  {  // broadcast from the last rank
    std::vector<bf16> buf(static_cast<size_t>(count), bf16{0});
    if (r == n - 1)
      for (int64_t i = 0; i < count; ++i) buf[i] = pattern(i, n - 1);
    comm->broadcast(buf.data(), count, DType::BF16, n - 1, "bf16 broadcast");
    EXPECT_EQ(wrong_bits(buf, [&](int64_t i) { return pattern(i, n - 1); }), 0);
  }
  {  // send/recv around a ring; the receive counts bf16 elements (2 bytes each)
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    std::vector<bf16> send(static_cast<size_t>(count)), got(static_cast<size_t>(count), bf16{0});
    for (int64_t i = 0; i < count; ++i) send[i] = pattern(i, r);
    WorkPtr rw = comm->recv_async(got.data(), count, DType::BF16, prev, 5, "bf16 ring");
    WorkPtr sw = comm->send_async(send.data(), count, DType::BF16, next, 5, "bf16 ring");
    rw->wait();
    sw->wait();
    EXPECT_EQ(wrong_bits(got, [&](int64_t i) { return pattern(i, prev); }), 0);
    // A message of count - 1 elements into a receive of count: the element count is checked in bf16 units.
    WorkPtr short_recv = comm->recv_async(got.data(), count, DType::BF16, prev, 6, "bf16 short");
    comm->send(send.data(), count - 1, DType::BF16, next, 6, "bf16 short");
    try {
      short_recv->wait();
      ADD_FAILURE() << "a message one bf16 element short must be an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fmt::format("received {} elements, expected {}", count - 1, count)),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace hpct::comm
