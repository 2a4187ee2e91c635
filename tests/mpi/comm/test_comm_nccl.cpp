// NcclCommunicator (label cuda): the same exact-value checks as test_comm_collectives on device buffers, one GPU per
// rank. Skips at run time when there is no usable GPU (cudaGetDeviceCount fails, e.g. no driver) or fewer GPUs on the
// node than ranks on it. Also: MpiCommunicator rejects device memory, NcclCommunicator rejects host memory.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "comm/comm.hpp"
#include "comm/nccl_communicator.hpp"
#include "core/cuda_check.hpp"
#include "core/error.hpp"

namespace hpct::comm {
namespace {

// Selects this rank's GPU (local rank on the node); returns "" when the test can run, else why it cannot.
std::string select_gpu() {
  int ngpu = 0;
  const cudaError_t rc = cudaGetDeviceCount(&ngpu);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("no usable GPU: ") + cudaGetErrorString(rc);
  }
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local = 0, local_n = 1;
  MPI_Comm_rank(node, &local);
  MPI_Comm_size(node, &local_n);
  MPI_Comm_free(&node);
  if (ngpu < local_n) return fmt::format("{} GPU(s) for {} ranks on this node: NCCL needs one GPU per rank", ngpu, local_n);
  CUDA_CHECK(cudaSetDevice(local));
  return "";
}

#define SKIP_WITHOUT_GPU()                                   \
  do {                                                       \
    const std::string why = select_gpu();                    \
    if (!why.empty()) GTEST_SKIP() << why;                   \
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
    EXPECT_EQ(count_wrong(buf.download(), [&](int64_t i) { return value<int32_t>(i, static_cast<int>(i / count)); }), 0);
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
