// NcclCommunicator (label cuda): the same exact-value checks as test_comm_collectives on device buffers (bf16 too), one
// GPU per rank. Skips at run time when there is no usable GPU (cudaGetDeviceCount fails, e.g. no driver) or fewer GPUs
// on the node than ranks on it. Also: MpiCommunicator rejects device memory, NcclCommunicator rejects host memory;
// wait() is stream-ordered on the input stream and wait_host() blocks the host; the sync guard (NcclSyncGuard) drains a
// stream that waits on NCCL work, and at np 2 turns a peer that never joins into an hpct::Error naming the operation.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <string>
#include <vector>

#include "comm/comm.hpp"
#include "comm/nccl_communicator.hpp"
#include "comm/nccl_sync_guard.hpp"
#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "tensor/bf16.hpp"
#include "../nccl_test_util.hpp"

namespace hpct::comm {
namespace {

using test::select_gpu;

#define SKIP_WITHOUT_GPU()                 \
  do {                                     \
    const std::string why = select_gpu();  \
    if (!why.empty()) GTEST_SKIP() << why; \
  } while (0)

CommOptions test_options() {
  CommOptions o;
  o.timeout_s = 60;
  return o;
}

template <typename T>
struct DeviceBuffer {
  explicit DeviceBuffer(size_t n) : n(n) { CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T))); }
  ~DeviceBuffer() { cudaFree(p); }
  void upload(const std::vector<T>& h) { CUDA_CHECK(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice)); }
  std::vector<T> download() const {
    std::vector<T> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  T* p = nullptr;
  size_t n;
};

// (r+1) * (i % 1009 + 1): exact in f32 and i64 for any reduction at small np.
template <typename T>
T value(int64_t i, int r) {
  return static_cast<T>((r + 1) * (i % 1009 + 1));
}
template <typename T>
T expected(int64_t i, int n, ReduceOp op) {
  const T b = static_cast<T>(i % 1009 + 1);
  const T sum = static_cast<T>(b * static_cast<T>(n * (n + 1) / 2));
  switch (op) {
    case ReduceOp::Sum: return sum;
    case ReduceOp::Avg: return static_cast<T>(sum / static_cast<T>(n));
    case ReduceOp::Max: return static_cast<T>(b * static_cast<T>(n));
    case ReduceOp::Min: return b;
  }
  return T{};
}

template <typename T, typename Want>
int64_t count_wrong(const std::vector<T>& got, Want&& want) {
  int64_t wrong = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i)
    if (got[i] != want(i)) {
      if (wrong < 3) ADD_FAILURE() << "element " << i << " is " << got[i] << ", should be " << want(i);
      ++wrong;
    }
  return wrong;
}

TEST(NcclCommunicator, AllreduceEveryOp) {
  SKIP_WITHOUT_GPU();
  auto world = make_world_communicator(test_options());
  NcclCommunicator nccl(*world, "world-nccl", test_options());
  EXPECT_EQ(nccl.rank(), world->rank());
  EXPECT_EQ(nccl.size(), world->size());
  EXPECT_EQ(nccl.device(), Device::CUDA);
  const int n = nccl.size(), r = nccl.rank();
  for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{1000003}})
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
      std::vector<float> hf(count);
      std::vector<int64_t> hi(count);
      for (int64_t i = 0; i < count; ++i) {
        hf[i] = value<float>(i, r);
        hi[i] = value<int64_t>(i, r);
      }
      DeviceBuffer<float> df(count);
      DeviceBuffer<int64_t> di(count);
      df.upload(hf);
      di.upload(hi);
      WorkPtr a = nccl.allreduce_async(df.p, count, DType::F32, op, "f32");
      WorkPtr b = nccl.allreduce_async(di.p, count, DType::I64, op, "i64");
      b->wait();
      a->wait();
      EXPECT_EQ(count_wrong(df.download(), [&](int64_t i) { return expected<float>(i, n, op); }), 0)
          << reduce_op_name(op) << " count " << count;
      EXPECT_EQ(count_wrong(di.download(), [&](int64_t i) { return expected<int64_t>(i, n, op); }), 0)
          << reduce_op_name(op) << " count " << count;
    }
  EXPECT_EQ(nccl.in_flight(), 0u);
}

TEST(NcclCommunicator, ReduceScatterAllgatherBroadcast) {
  SKIP_WITHOUT_GPU();
  auto world = make_world_communicator(test_options());
  NcclCommunicator nccl(*world, "world-nccl", test_options());
  const int n = nccl.size(), r = nccl.rank();
  const int64_t count = 100003;
  {  // reduce_scatter, then in place
    std::vector<float> h(count * n);
    for (int64_t i = 0; i < count * n; ++i) h[i] = value<float>(i, r);
    DeviceBuffer<float> send(count * n), recv(count);
    send.upload(h);
    nccl.reduce_scatter(send.p, recv.p, count, DType::F32, ReduceOp::Sum, "rs");
    EXPECT_EQ(count_wrong(recv.download(), [&](int64_t j) { return expected<float>(r * count + j, n, ReduceOp::Sum); }),
              0);
    nccl.reduce_scatter(send.p, send.p + r * count, count, DType::F32, ReduceOp::Max, "rs in place");
    std::vector<float> all = send.download();
    std::vector<float> mine(all.begin() + r * count, all.begin() + (r + 1) * count);
    EXPECT_EQ(count_wrong(mine, [&](int64_t j) { return expected<float>(r * count + j, n, ReduceOp::Max); }), 0);
  }
  {  // allgather in place
    std::vector<int32_t> h(count * n, -1);
    for (int64_t i = 0; i < count; ++i) h[r * count + i] = value<int32_t>(r * count + i, r);
    DeviceBuffer<int32_t> buf(count * n);
    buf.upload(h);
    nccl.allgather(buf.p + r * count, buf.p, count, DType::I32, "ag in place");
    EXPECT_EQ(count_wrong(buf.download(), [&](int64_t i) { return value<int32_t>(i, static_cast<int>(i / count)); }),
              0);
  }
  for (int root = 0; root < n; ++root) {  // broadcast from every root
    std::vector<double> h(count, -1.0);
    if (r == root)
      for (int64_t i = 0; i < count; ++i) h[i] = value<double>(i, root);
    DeviceBuffer<double> buf(count);
    buf.upload(h);
    nccl.broadcast(buf.p, count, DType::F64, root, "bcast");
    EXPECT_EQ(count_wrong(buf.download(), [&](int64_t i) { return value<double>(i, root); }), 0) << "root " << root;
  }
  nccl.barrier("end");
}

// bf16 (ncclBfloat16) on device buffers: (r + 1) * (i % 25 + 1) keeps every partial sum an integer <= 250, exact in
// bf16 whatever order NCCL combines in, so sums, averages and maxima are exact; reduce_scatter and a ring of sends move
// 2-byte elements.
TEST(NcclCommunicator, Bf16CollectivesAndSendRecv) {
  SKIP_WITHOUT_GPU();
  auto world = make_world_communicator(test_options());
  NcclCommunicator nccl(*world, "world-nccl", test_options());
  const int n = nccl.size(), r = nccl.rank();
  const int64_t count = 100003;
  auto b = [](int64_t i) { return static_cast<float>(i % 25 + 1); };
  auto upload = [&](DeviceBuffer<bf16>& d, int64_t len, int64_t first) {
    std::vector<bf16> h(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) h[i] = to_bf16(static_cast<float>(r + 1) * b(first + i));
    d.upload(h);
  };
  auto count_wrong_bf16 = [](const std::vector<bf16>& got, auto&& want) {
    int64_t wrong = 0;
    for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i)
      if (to_f32(got[i]) != want(i) && wrong++ < 3)
        ADD_FAILURE() << "element " << i << " is " << to_f32(got[i]) << ", should be " << want(i);
    return wrong;
  };
  const float tri = static_cast<float>(n * (n + 1) / 2);
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
    DeviceBuffer<bf16> buf(count);
    upload(buf, count, 0);
    nccl.allreduce(buf.p, count, DType::BF16, op, "bf16 allreduce");
    const float k = op == ReduceOp::Sum   ? tri
                    : op == ReduceOp::Avg ? tri / static_cast<float>(n)
                                          : static_cast<float>(n);
    EXPECT_EQ(count_wrong_bf16(buf.download(), [&](int64_t i) { return k * b(i); }), 0) << reduce_op_name(op);
  }
  {
    DeviceBuffer<bf16> send(count * n), recv(count);
    upload(send, count * n, 0);
    nccl.reduce_scatter(send.p, recv.p, count, DType::BF16, ReduceOp::Sum, "bf16 reduce_scatter");
    EXPECT_EQ(count_wrong_bf16(recv.download(), [&](int64_t j) { return tri * b(r * count + j); }), 0);
  }
  {
    DeviceBuffer<bf16> out(count), in(count);
    upload(out, count, 0);
    const int prev = (r + n - 1) % n;
    nccl.group_start();
    WorkPtr s = nccl.send_async(out.p, count, DType::BF16, (r + 1) % n, 0, "bf16 ring");
    WorkPtr q = nccl.recv_async(in.p, count, DType::BF16, prev, 0, "bf16 ring");
    nccl.group_end();
    q->wait();
    s->wait();
    EXPECT_EQ(count_wrong_bf16(in.download(), [&](int64_t i) { return static_cast<float>(prev + 1) * b(i); }), 0);
  }
}

TEST(NcclCommunicator, SendRecvRingInAGroup) {
  SKIP_WITHOUT_GPU();
  auto world = make_world_communicator(test_options());
  NcclCommunicator nccl(*world, "pp-nccl", test_options());
  const int n = nccl.size(), r = nccl.rank();
  const int64_t count = 4099;
  std::vector<float> h(count);
  for (int64_t i = 0; i < count; ++i) h[i] = value<float>(i, r);
  DeviceBuffer<float> out(count), in(count);
  out.upload(h);
  nccl.group_start();
  WorkPtr s = nccl.send_async(out.p, count, DType::F32, (r + 1) % n, 0, "act");
  WorkPtr q = nccl.recv_async(in.p, count, DType::F32, (r + n - 1) % n, 0, "act");
  nccl.group_end();
  q->wait();
  s->wait();
  EXPECT_EQ(count_wrong(in.download(), [&](int64_t i) { return value<float>(i, (r + n - 1) % n); }), 0);
}

// wait() orders the input stream after the operation without blocking the host: a copy queued on that stream after
// wait() sees the result (64 MiB, so an unordered copy would run while the allreduce still does), and the guard's
// synchronize of that stream makes it readable. wait_host() blocks: a plain cudaMemcpy (legacy stream, which does not
// synchronize with NCCL's non-blocking stream) reads the result afterwards.
TEST(NcclCommunicator, WaitIsStreamOrderedAndWaitHostBlocks) {
  SKIP_WITHOUT_GPU();
  auto world = make_world_communicator(test_options());
  NcclCommunicator nccl(*world, "world-nccl", test_options());
  cudaStream_t compute = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  nccl.set_input_stream(compute);
  EXPECT_EQ(nccl.input_stream(), compute);
  NcclSyncGuard guard(world->rank(), 60.0);
  guard.watch(nccl);
  const int n = nccl.size(), r = nccl.rank();
  const int64_t count = int64_t{16} << 20;
  std::vector<float> h(count);
  for (int64_t i = 0; i < count; ++i) h[i] = value<float>(i, r);
  DeviceBuffer<float> buf(count);
  buf.upload(h);
  WorkPtr w = nccl.allreduce_async(buf.p, count, DType::F32, ReduceOp::Sum, "stream-ordered");
  w->wait();
  EXPECT_EQ(w->waited_ms(), 0.0);  // the host did not block
  EXPECT_EQ(nccl.in_flight(), 0u);
  std::vector<float> got(count, -1.0f);
  CUDA_CHECK(cudaMemcpyAsync(got.data(), buf.p, count * sizeof(float), cudaMemcpyDeviceToHost, compute));
  guard.synchronize(compute, "test: the copy after a stream-ordered wait");
  EXPECT_EQ(count_wrong(got, [&](int64_t i) { return expected<float>(i, n, ReduceOp::Sum); }), 0);
  EXPECT_EQ(nccl.unfinished(), "");
  EXPECT_EQ(nccl.async_error(), "");
  // host-blocking form
  buf.upload(h);
  WorkPtr m = nccl.allreduce_async(buf.p, count, DType::F32, ReduceOp::Max, "host wait");
  m->wait_host();
  EXPECT_EQ(count_wrong(buf.download(), [&](int64_t i) { return expected<float>(i, n, ReduceOp::Max); }), 0);
  CUDA_CHECK(cudaStreamDestroy(compute));
}

// At np 2: rank 0 queues an allreduce rank 1 never joins and waits for its compute stream through the guard, with
// comm.timeout_s = 3: the guard must abort the communicator and throw an error naming the rank and the operation
// within about the timeout (instead of blocking forever in cudaStreamSynchronize). Rank 1 then aborts its own.
TEST(NcclCommunicator, SyncGuardTurnsAStalledPeerIntoAnError) {
  SKIP_WITHOUT_GPU();
  auto world = make_world_communicator(test_options());
  if (world->size() != 2) GTEST_SKIP() << "needs exactly 2 ranks";
  CommOptions quick;
  quick.timeout_s = 3.0;
  NcclCommunicator nccl(*world, "dp", quick);
  cudaStream_t compute = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  nccl.set_input_stream(compute);
  DeviceBuffer<float> buf(1024);
  if (world->rank() == 0) {
    NcclSyncGuard guard(0, quick.timeout_s);
    guard.watch(nccl);
    WorkPtr w = nccl.allreduce_async(buf.p, 1024, DType::F32, ReduceOp::Sum, "grad bucket 7");
    w->wait();
    const auto t0 = std::chrono::steady_clock::now();
    try {
      guard.synchronize(compute, "kernels::synchronize of the compute stream");
      ADD_FAILURE() << "the guard returned although the peer never joined";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
      EXPECT_NE(msg.find("timed out"), std::string::npos) << msg;
      EXPECT_NE(msg.find("grad bucket 7"), std::string::npos) << msg;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GE(s, quick.timeout_s);
    EXPECT_LT(s, quick.timeout_s + 30.0);
    EXPECT_TRUE(nccl.aborted());
  }
  world->barrier("after the stalled allreduce");
  if (world->rank() == 1) nccl.abort();
  CUDA_CHECK(cudaStreamSynchronize(compute));  // drained: the aborted communicator's kernel exited
  CUDA_CHECK(cudaStreamDestroy(compute));
}

TEST(NcclCommunicator, BuffersOnTheWrongDeviceAreRejected) {
  SKIP_WITHOUT_GPU();
  auto world = make_world_communicator(test_options());
  NcclCommunicator nccl(*world, "world-nccl", test_options());
  DeviceBuffer<float> dev(16);
  std::vector<float> host(16, 1.0f);
  try {
    world->allreduce(dev.p, 16, DType::F32, ReduceOp::Sum, "device grads");
    ADD_FAILURE() << "MpiCommunicator accepted device memory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA device memory"), std::string::npos) << e.what();
  }
  try {
    nccl.allreduce(host.data(), 16, DType::F32, ReduceOp::Sum, "host grads");
    ADD_FAILURE() << "NcclCommunicator accepted host memory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not CUDA device memory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(world->in_flight(), 0u);
  EXPECT_EQ(nccl.in_flight(), 0u);
}

}  // namespace
}  // namespace hpct::comm
