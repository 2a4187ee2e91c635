// MpiCommunicator at np 1, 2, 4: every collective against exact values ("sum of rank+1 over ranks" patterns), for
// every dtype and reduction, at odd counts; in-place forms; point-to-point rings; async overlap driven by progress();
// split() sub-groups; the argument checks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm.hpp"
#include "core/error.hpp"

namespace hpct::comm {
namespace {

CommOptions test_options() {
  CommOptions o;
  o.timeout_s = 60;  // a hang fails the test instead of the ctest timeout
  return o;
}

// The element pattern: rank r holds (r+1) * base(i), base(i) = (i % kMod + 1) * kScale. kScale puts i64 values above
// 2^32 and f64 values below 1 (both exact); u8 keeps its sums under 256 at np 4 (7 * 10 = 70).
template <typename T>
struct Pat;
template <>
struct Pat<float> {
  static constexpr DType dtype = DType::F32;
  static constexpr int64_t kMod = 1009;
  static float scale() { return 1.0f; }
};
template <>
struct Pat<double> {
  static constexpr DType dtype = DType::F64;
  static constexpr int64_t kMod = 1009;
  static double scale() { return 1.0 / 1048576.0; }  // 2^-20
};
template <>
struct Pat<int32_t> {
  static constexpr DType dtype = DType::I32;
  static constexpr int64_t kMod = 1009;
  static int32_t scale() { return 3; }
};
template <>
struct Pat<int64_t> {
  static constexpr DType dtype = DType::I64;
  static constexpr int64_t kMod = 1009;
  static int64_t scale() { return int64_t{1} << 33; }
};
template <>
struct Pat<uint8_t> {
  static constexpr DType dtype = DType::U8;
  static constexpr int64_t kMod = 7;
  static uint8_t scale() { return 1; }
};

template <typename T>
T base(int64_t i) {
  return static_cast<T>(static_cast<T>(i % Pat<T>::kMod + 1) * Pat<T>::scale());
}
template <typename T>
T value(int64_t i, int rank) {
  return static_cast<T>(static_cast<T>(rank + 1) * base<T>(i));
}
// The reduction over ranks 0..n-1 of value(i, r).
template <typename T>
T expected(int64_t i, int n, ReduceOp op) {
  const T b = base<T>(i);
  const T sum = static_cast<T>(b * static_cast<T>(n * (n + 1) / 2));
  switch (op) {
    case ReduceOp::Sum: return sum;
    case ReduceOp::Avg: return static_cast<T>(sum / static_cast<T>(n));
    case ReduceOp::Max: return static_cast<T>(b * static_cast<T>(n));
    case ReduceOp::Min: return b;
  }
  return T{};
}

// Counts mismatches and reports the first few (a 10^6-element EXPECT_EQ loop would flood the log).
template <typename T, typename Want>
int64_t count_wrong(const std::vector<T>& got, Want&& want, const std::string& what) {
  int64_t wrong = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i) {
    const T w = want(i);
    if (got[i] != w) {
      if (wrong < 3) ADD_FAILURE() << what << ": element " << i << " is " << +got[i] << ", should be " << +w;
      ++wrong;
    }
  }
  return wrong;
}

const std::vector<int64_t> kCounts = {1, 7, 1000003};
const std::vector<ReduceOp> kOps = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min};

template <typename T>
void check_allreduce(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  for (int64_t count : kCounts)
    for (ReduceOp op : kOps) {
      std::vector<T> buf(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) buf[i] = value<T>(i, r);
      comm.allreduce(buf.data(), count, Pat<T>::dtype, op, "test");
      const std::string what = fmt::format("allreduce {} {} count {} np {}", dtype_name(Pat<T>::dtype),
                                           reduce_op_name(op), count, n);
      EXPECT_EQ(count_wrong(
                    buf, [&](int64_t i) { return expected<T>(i, n, op); }, what),
                0)
          << what;
    }
}

TEST(MpiCommunicator, IdentityMatchesMpi) {
  auto comm = make_world_communicator(test_options());
  int r = -1, n = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  EXPECT_EQ(comm->rank(), r);
  EXPECT_EQ(comm->size(), n);
  EXPECT_EQ(comm->name(), "world");
  EXPECT_EQ(comm->device(), Device::CPU);
  EXPECT_EQ(comm->options().timeout_s, 60.0);
  int cmp = MPI_UNEQUAL;
  MPI_Comm_compare(comm->mpi_comm(), MPI_COMM_WORLD, &cmp);
  EXPECT_EQ(cmp, MPI_CONGRUENT);  // a duplicate, not MPI_COMM_WORLD itself
}

TEST(MpiCommunicator, AllreduceEveryDtypeOpAndOddCount) {
  auto comm = make_world_communicator(test_options());
  check_allreduce<float>(*comm);
  check_allreduce<double>(*comm);
  check_allreduce<int32_t>(*comm);
  check_allreduce<int64_t>(*comm);
  check_allreduce<uint8_t>(*comm);
}

template <typename T>
void check_reduce_scatter(Communicator& comm, bool in_place) {
  const int n = comm.size(), r = comm.rank();
  for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{100003}})
    for (ReduceOp op : kOps) {
      // Block b, element j carries global index b*count + j, so a block landing on the wrong rank shows.
      std::vector<T> send(static_cast<size_t>(count * n));
      for (int64_t i = 0; i < count * n; ++i) send[i] = value<T>(i, r);
      std::vector<T> recv(static_cast<size_t>(count), T{});
      const std::string what = fmt::format("reduce_scatter{} {} {} count {} np {}", in_place ? " (in place)" : "",
                                           dtype_name(Pat<T>::dtype), reduce_op_name(op), count, n);
      if (in_place) {
        T* mine = send.data() + r * count;
        comm.reduce_scatter(send.data(), mine, count, Pat<T>::dtype, op, "test");
        recv.assign(mine, mine + count);
      } else {
        comm.reduce_scatter(send.data(), recv.data(), count, Pat<T>::dtype, op, "test");
      }
      EXPECT_EQ(count_wrong(
                    recv, [&](int64_t j) { return expected<T>(r * count + j, n, op); }, what),
                0)
          << what;
    }
}

TEST(MpiCommunicator, ReduceScatterEveryDtypeAndOp) {
  auto comm = make_world_communicator(test_options());
  for (bool in_place : {false, true}) {
    check_reduce_scatter<float>(*comm, in_place);
    check_reduce_scatter<double>(*comm, in_place);
    check_reduce_scatter<int32_t>(*comm, in_place);
    check_reduce_scatter<int64_t>(*comm, in_place);
    check_reduce_scatter<uint8_t>(*comm, in_place);
  }
}

template <typename T>
void check_allgather(Communicator& comm, int64_t count, bool in_place) {
  const int n = comm.size(), r = comm.rank();
  // Rank q contributes value(i, q) at global index q*count + i.
  std::vector<T> recv(static_cast<size_t>(count * n), T{});
  std::vector<T> send(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) send[i] = value<T>(r * count + i, r);
  if (in_place) {
    std::copy(send.begin(), send.end(), recv.begin() + r * count);
    comm.allgather(recv.data() + r * count, recv.data(), count, Pat<T>::dtype, "test");
  } else {
    comm.allgather(send.data(), recv.data(), count, Pat<T>::dtype, "test");
  }
  const std::string what = fmt::format("allgather{} {} count {} np {}", in_place ? " (in place)" : "",
                                       dtype_name(Pat<T>::dtype), count, n);
  EXPECT_EQ(count_wrong(
                recv, [&](int64_t i) { return value<T>(i, static_cast<int>(i / count)); }, what),
            0)
      << what;
}

TEST(MpiCommunicator, AllgatherOutOfPlaceAndInPlace) {
  auto comm = make_world_communicator(test_options());
  for (bool in_place : {false, true}) {
    for (int64_t count : kCounts) check_allgather<float>(*comm, count, in_place);
    check_allgather<double>(*comm, 7, in_place);
    check_allgather<int32_t>(*comm, 7, in_place);
    check_allgather<int64_t>(*comm, 7, in_place);
    check_allgather<uint8_t>(*comm, 7, in_place);
  }
}

// Uneven blocks for the _v forms: rank 1's block is empty, the others differ in length.
std::vector<int64_t> uneven_counts(int n) {
  std::vector<int64_t> c(n);
  for (int q = 0; q < n; ++q) c[q] = q == 1 ? 0 : 1000 + 7 * q;
  return c;
}

template <typename T>
void check_v_forms(Communicator& comm, bool in_place) {
  const int n = comm.size(), r = comm.rank();
  const std::vector<int64_t> counts = uneven_counts(n);
  int64_t total = 0, displ = 0;
  for (int q = 0; q < n; ++q) {
    if (q == r) displ = total;
    total += counts[q];
  }
  const int64_t mine = counts[r];
  const DType t = Pat<T>::dtype;
  for (ReduceOp op : kOps) {  // reduce_scatter_v: rank r gets the reduction of global indices [displ, displ+mine)
    std::vector<T> send(static_cast<size_t>(total));
    for (int64_t i = 0; i < total; ++i) send[i] = value<T>(i, r);
    std::vector<T> recv(static_cast<size_t>(mine), T{});
    if (in_place) {
      comm.reduce_scatter_v_async(send.data(), send.data() + displ, counts, t, op, "test")->wait();
      recv.assign(send.begin() + displ, send.begin() + displ + mine);
    } else {
      comm.reduce_scatter_v_async(send.data(), recv.data(), counts, t, op, "test")->wait();
    }
    const std::string what = fmt::format("reduce_scatter_v{} {} {} np {}", in_place ? " (in place)" : "", dtype_name(t),
                                         reduce_op_name(op), n);
    EXPECT_EQ(count_wrong(
                  recv, [&](int64_t j) { return expected<T>(displ + j, n, op); }, what),
              0)
        << what;
  }
  {  // allgather_v: rank q's block holds value(i, q) at global indices of block q
    std::vector<T> recv(static_cast<size_t>(total), T{});
    std::vector<T> send(static_cast<size_t>(mine));
    for (int64_t j = 0; j < mine; ++j) send[j] = value<T>(displ + j, r);
    if (in_place) {
      std::copy(send.begin(), send.end(), recv.begin() + displ);
      comm.allgather_v_async(recv.data() + displ, recv.data(), counts, t, "test")->wait();
    } else {
      comm.allgather_v_async(send.data(), recv.data(), counts, t, "test")->wait();
    }
    std::vector<int> owner(static_cast<size_t>(total));
    for (int q = 0, i = 0; q < n; ++q)
      for (int64_t j = 0; j < counts[q]; ++j) owner[i++] = q;
    const std::string what = fmt::format("allgather_v{} {} np {}", in_place ? " (in place)" : "", dtype_name(t), n);
    EXPECT_EQ(count_wrong(
                  recv, [&](int64_t i) { return value<T>(i, owner[i]); }, what),
              0)
        << what;
  }
}

TEST(MpiCommunicator, UnevenReduceScatterAndAllgather) {
  auto comm = make_world_communicator(test_options());
  for (bool in_place : {false, true}) {
    check_v_forms<float>(*comm, in_place);
    check_v_forms<int64_t>(*comm, in_place);
    check_v_forms<uint8_t>(*comm, in_place);
  }
  std::vector<float> x(8);
  EXPECT_THROW(comm->allgather_v_async(x.data(), x.data(), std::vector<int64_t>(comm->size() + 1, 1), DType::F32, "n"),
               Error);
}

TEST(MpiCommunicator, BroadcastFromEveryRoot) {
  auto comm = make_world_communicator(test_options());
  const int n = comm->size(), r = comm->rank();
  for (int root = 0; root < n; ++root)
    for (int64_t count : {int64_t{1}, int64_t{1000003}}) {
      std::vector<int64_t> buf(static_cast<size_t>(count), -1);
      if (r == root)
        for (int64_t i = 0; i < count; ++i) buf[i] = value<int64_t>(i, root);
      comm->broadcast(buf.data(), count, DType::I64, root, "test");
      const std::string what = fmt::format("broadcast from root {} count {} np {}", root, count, n);
      EXPECT_EQ(count_wrong(
                    buf, [&](int64_t i) { return value<int64_t>(i, root); }, what),
                0)
          << what;
    }
}

TEST(MpiCommunicator, SendRecvRingWithTags) {
  auto comm = make_world_communicator(test_options());
  const int n = comm->size(), r = comm->rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const int64_t count = 100003;
  // Two messages to the same peer, distinguished by tag only, received in the opposite order.
  std::vector<float> a(count), b(count), got_a(count, -1.0f), got_b(count, -1.0f);
  for (int64_t i = 0; i < count; ++i) {
    a[i] = value<float>(i, r);
    b[i] = -value<float>(i, r);
  }
  WorkPtr rb = comm->recv_async(got_b.data(), count, DType::F32, prev, 2, "ring b");
  WorkPtr ra = comm->recv_async(got_a.data(), count, DType::F32, prev, 1, "ring a");
  WorkPtr sa = comm->send_async(a.data(), count, DType::F32, next, 1, "ring a");
  WorkPtr sb = comm->send_async(b.data(), count, DType::F32, next, 2, "ring b");
  rb->wait();
  ra->wait();
  sa->wait();
  sb->wait();
  EXPECT_EQ(count_wrong(
                got_a, [&](int64_t i) { return value<float>(i, prev); }, "ring tag 1"),
            0);
  EXPECT_EQ(count_wrong(
                got_b, [&](int64_t i) { return -value<float>(i, prev); }, "ring tag 2"),
            0);
}

TEST(MpiCommunicator, RecvOfWrongCountIsAnError) {
  auto comm = make_world_communicator(test_options());
  const int n = comm->size(), r = comm->rank();
  std::vector<int32_t> out(5, r), in(7, -1);
  WorkPtr rw = comm->recv_async(in.data(), 7, DType::I32, (r + n - 1) % n, 0, "short message");
  comm->send(out.data(), 5, DType::I32, (r + 1) % n, 0, "short message");
  try {
    rw->wait();
    FAIL() << "a 5-element message into a 7-element recv must be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("received 5 elements, expected 7"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(short message)"), std::string::npos) << e.what();
  }
}

TEST(MpiCommunicator, BarrierWaitsForTheLastRank) {
  auto comm = make_world_communicator(test_options());
  comm->barrier("align");
  const auto t0 = std::chrono::steady_clock::now();
  if (comm->rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  comm->barrier("test");
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (comm->size() > 1) {
    EXPECT_GE(ms, 250.0) << "rank " << comm->rank() << " left the barrier before rank 0 entered";
  }
}

TEST(MpiCommunicator, AsyncOverlapCompletedByProgressOutOfOrder) {
  auto comm = make_world_communicator(test_options());
  const int n = comm->size(), r = comm->rank();
  constexpr int kOps = 4;
  const int64_t count = 1 << 18;  // 1 MiB of f32 each
  std::vector<std::vector<float>> bufs(kOps, std::vector<float>(count));
  std::vector<WorkPtr> works;
  for (int k = 0; k < kOps; ++k) {
    for (int64_t i = 0; i < count; ++i) bufs[k][i] = value<float>(i + k, r);
    works.push_back(
        comm->allreduce_async(bufs[k].data(), count, DType::F32, ReduceOp::Avg, fmt::format("bucket {}", k)));
  }
  works.push_back(comm->barrier_async("after buckets"));
  EXPECT_EQ(comm->in_flight(), static_cast<size_t>(kOps + 1));
  // Only progress() until everything completed: it must finish the operations, Avg division included.
  const auto t0 = std::chrono::steady_clock::now();
  while (comm->in_flight() > 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
    comm->progress();
    std::this_thread::sleep_for(std::chrono::microseconds(100));  // "compute" between polls
  }
  ASSERT_EQ(comm->in_flight(), 0u);
  for (int k = 0; k < kOps; ++k) {
    const std::string what = fmt::format("bucket {} np {}", k, n);
    EXPECT_EQ(count_wrong(
                  bufs[k], [&](int64_t i) { return expected<float>(i + k, n, ReduceOp::Avg); }, what),
              0);
  }
  // Completed Works: test() and wait() return at once, in any order, without blocking.
  for (int k = kOps; k >= 0; --k) {
    EXPECT_TRUE(works[k]->test());
    works[k]->wait();
    EXPECT_EQ(works[k]->waited_ms(), 0.0);
  }
}

TEST(MpiCommunicator, OutstandingWorksWaitedInReverseOrder) {
  auto comm = make_world_communicator(test_options());
  const int n = comm->size(), r = comm->rank();
  std::vector<std::vector<int64_t>> bufs(3, std::vector<int64_t>(1000, 0));
  std::vector<WorkPtr> works;
  for (int k = 0; k < 3; ++k) {
    for (int64_t i = 0; i < 1000; ++i) bufs[k][i] = value<int64_t>(i * (k + 1), r);
    works.push_back(comm->allreduce_async(bufs[k].data(), 1000, DType::I64, ReduceOp::Sum, "reverse"));
  }
  for (int k = 2; k >= 0; --k) works[k]->wait();
  EXPECT_EQ(comm->in_flight(), 0u);
  for (int k = 0; k < 3; ++k)
    EXPECT_EQ(count_wrong(
                  bufs[k], [&](int64_t i) { return expected<int64_t>(i * (k + 1), n, ReduceOp::Sum); }, "rev"),
              0);
}

TEST(MpiCommunicator, DestroyingTheCommunicatorCompletesItsWorks) {
  auto comm = make_world_communicator(test_options());
  const int n = comm->size(), r = comm->rank();
  std::vector<double> buf(4096);
  for (int64_t i = 0; i < 4096; ++i) buf[i] = value<double>(i, r);
  WorkPtr w = comm->allreduce_async(buf.data(), 4096, DType::F64, ReduceOp::Avg, "orphan");
  comm.reset();
  EXPECT_TRUE(w->test());
  EXPECT_EQ(count_wrong(
                buf, [&](int64_t i) { return expected<double>(i, n, ReduceOp::Avg); }, "orphan"),
            0);
}

TEST(MpiCommunicator, SplitEvenOddAndReversedKey) {
  auto comm = make_world_communicator(test_options());
  const int n = comm->size(), r = comm->rank();
  const int parity = r % 2;
  auto sub = comm->split(parity, r, parity ? "odd" : "even");
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), (n + 1 - parity) / 2);
  EXPECT_EQ(sub->rank(), r / 2);
  EXPECT_EQ(sub->name(), parity ? "odd" : "even");
  EXPECT_EQ(sub->options().timeout_s, comm->options().timeout_s);
  int64_t v = r;  // sum of the world ranks of my parity
  sub->allreduce(&v, 1, DType::I64, ReduceOp::Sum, "parity sum");
  int64_t want = 0;
  for (int q = parity; q < n; q += 2) want += q;
  EXPECT_EQ(v, want);
  // Each sub-group broadcasts from its last rank: the largest world rank of that parity.
  int32_t top = r;
  sub->broadcast(&top, 1, DType::I32, sub->size() - 1, "top");
  EXPECT_EQ(top, parity + 2 * (sub->size() - 1));

  auto reversed = comm->split(0, n - 1 - r, "reversed");
  ASSERT_NE(reversed, nullptr);
  EXPECT_EQ(reversed->size(), n);
  EXPECT_EQ(reversed->rank(), n - 1 - r);

  auto only_rank0 = comm->split(r == 0 ? 0 : MPI_UNDEFINED, 0, "rank0");
  EXPECT_EQ(only_rank0 == nullptr, r != 0);
  if (only_rank0) {
    EXPECT_EQ(only_rank0->size(), 1);
  }
}

TEST(MpiCommunicator, ArgumentChecks) {
  auto comm = make_world_communicator(test_options());
  const int n = comm->size();
  float x[8] = {};
  auto message_of = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string big = message_of(
      [&] { comm->allreduce(x, int64_t{INT_MAX} + 1, DType::F32, ReduceOp::Sum, "huge bucket"); });
  EXPECT_NE(big.find("2147483648 elements exceed"), std::string::npos) << big;
  EXPECT_NE(big.find("huge bucket"), std::string::npos) << big;
  EXPECT_NE(message_of([&] { comm->allreduce(x, -1, DType::F32, ReduceOp::Sum, "neg"); }).find("negative"),
            std::string::npos);
  EXPECT_NE(message_of([&] { comm->broadcast(x, 1, DType::F32, n, "root"); }).find("is not a rank"), std::string::npos);
  EXPECT_NE(message_of([&] { comm->send(x, 1, DType::F32, -1, 0, "p2p"); }).find("is not a rank"), std::string::npos);
  {  // send overlaps recv without being block rank() of it
    std::vector<float> recv(static_cast<size_t>(2 * n));
    const float* bad = recv.data() + (comm->rank() == 0 ? 1 : 0);
    EXPECT_NE(message_of([&] { comm->allgather(bad, recv.data(), 2, DType::F32, "overlap"); }).find("overlap"),
              std::string::npos);
  }
  EXPECT_EQ(comm->in_flight(), 0u);
  comm->barrier("after checks");  // nothing was posted by the failed calls: the group is still in step
}

}  // namespace
}  // namespace hpct::comm
