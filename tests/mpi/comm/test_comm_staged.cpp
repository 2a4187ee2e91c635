// HostStagedCommunicator (parallel/staged_communicator.hpp) at np 1, 2, 4: every operation through the staging blocks
// gives the MpiCommunicator's result bit for bit (f32, bf16, f16; sum, avg, max; in place and not; uneven counts, a
// rank with none), whole or in chunks of a small slot, counts the same CommVolume, holds exactly its planned blocks,
// hands them back, completes the oldest operation when every slot is held, and a Work destroyed unwaited still
// delivers. Bit for bit holds here because every message stays below libnbc's 64 KiB switch (mpi_communicator.cpp),
// whole or chunked, so MPI adds in the same order either way; the apps' larger buffers may differ by that order's
// rounding beyond two ranks (staged_communicator.hpp). On the CPU the copies are memcpy (the emulation the dry runs
// use); where a GPU is present the same checks run again with device buffers on a CUDA stream.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.hpp"
#include "core/error.hpp"
#include "kernels/kernels.hpp"
#include "parallel/staged_communicator.hpp"
#include "tensor/bf16.hpp"
#include "tensor/fp16.hpp"
#if HPCT_HAVE_CUDA
#include "kernels/cuda/cuda_device.hpp"
#endif

namespace hpct::parallel {
namespace {

comm::CommOptions test_options() {
  comm::CommOptions o;
  o.timeout_s = 60;  // a hang fails the test instead of the ctest timeout
  return o;
}

// Deterministic bytes of a valid value of `dtype`, different on every (i, rank).
std::vector<char> values(DType dtype, int64_t n, int rank, int salt = 0) {
  std::vector<char> out(static_cast<size_t>(n) * dtype_size(dtype));
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(((i * 37 + rank * 101 + salt * 7) % 201) - 100) / 16.0f;
    char* p = out.data() + static_cast<size_t>(i) * dtype_size(dtype);
    if (dtype == DType::F32) std::memcpy(p, &v, 4);
    if (dtype == DType::BF16) {
      const bf16 b = to_bf16(v);
      std::memcpy(p, &b, 2);
    }
    if (dtype == DType::F16) {
      const fp16 h = to_fp16(v);
      std::memcpy(p, &h, 2);
    }
  }
  return out;
}

// Where the staged communicator's buffers live: host memory on the CPU, device memory with a stream on CUDA.
struct Side {
  ExecContext exec;
  void* alloc(size_t bytes) const { return device_alloc(exec.device, bytes); }
  void free(void* p) const { device_free(exec.device, p); }
  void put(void* dst, const std::vector<char>& src) const {
    kernels::copy_from_host(exec, dst, src.data(), static_cast<int64_t>(src.size()));
    kernels::synchronize(exec);
  }
  std::vector<char> get(const void* src, size_t bytes) const {
    std::vector<char> out(bytes);
    kernels::copy_to_host(exec, out.data(), src, static_cast<int64_t>(bytes));
    kernels::synchronize(exec);
    return out;
  }
};

// The sides to test: the CPU always, CUDA where a GPU is visible (its stream lives as long as the process).
std::vector<Side> sides() {
  std::vector<Side> s{Side{}};
#if HPCT_HAVE_CUDA
  if (kernels::cuda_unavailable_reason().empty()) {
    static kernels::CudaStream* stream = [] {
      kernels::cuda_select_device(0);
      return new kernels::CudaStream();
    }();
    Side cuda;
    cuda.exec.device = Device::CUDA;
    cuda.exec.stream = stream->get();
    s.push_back(cuda);
  }
#endif
  return s;
}

// The production slots, and slots so small that every operation below runs in many chunks (odd sizes: chunks end
// inside elements' rank blocks at different places).
std::vector<StagingPlan> plans() {
  StagingPlan tiny;
  tiny.slots = 2;
  tiny.slot_bytes = 200;
  return {collective_staging(), tiny};
}

class Staged : public ::testing::Test {
 protected:
  void SetUp() override { world_ = comm::make_world_communicator(test_options()); }
  std::unique_ptr<comm::MpiCommunicator> world_;
};

TEST_F(Staged, AllreduceMatchesMpiForEveryTypeAndOperator) {
  for (const Side& side : sides()) {
    for (const StagingPlan& plan : plans()) {
      HostStagedCommunicator staged(*world_, side.exec, "staged", plan);
      EXPECT_EQ(staged.device(), side.exec.device);
      EXPECT_EQ(staged.staging_bytes(), plan.bytes());
      for (DType dt : {DType::F32, DType::BF16, DType::F16})
        for (comm::ReduceOp op : {comm::ReduceOp::Sum, comm::ReduceOp::Avg, comm::ReduceOp::Max}) {
          const int64_t n = 1000;
          std::vector<char> want = values(dt, n, world_->rank());
          world_->allreduce(want.data(), n, dt, op, "reference");
          void* dev = side.alloc(want.size());
          side.put(dev, values(dt, n, world_->rank()));
          staged.allreduce(dev, n, dt, op, "staged");
          EXPECT_EQ(side.get(dev, want.size()), want)
              << device_name(side.exec.device) << " dtype " << static_cast<int>(dt) << " op " << reduce_op_name(op);
          side.free(dev);
        }
      EXPECT_EQ(staged.staging_blocks_in_use(), 0u);
    }
  }
}

TEST_F(Staged, ReduceScatterAndAllgatherInPlaceAndNot) {
  const int n = world_->size(), r = world_->rank();
  const int64_t share = 333;
  const size_t es = dtype_size(DType::F32), total = static_cast<size_t>(share) * n * es;
  for (const Side& side : sides())
    for (const StagingPlan& plan : plans()) {
      HostStagedCommunicator staged(*world_, side.exec, "staged", plan);
      for (bool in_place : {false, true}) {
        std::vector<char> ref = values(DType::F32, share * n, r), ref_out(share * es);
        world_->reduce_scatter(ref.data(), ref_out.data(), share, DType::F32, comm::ReduceOp::Sum, "reference");
        char* send = static_cast<char*>(side.alloc(total));
        char* recv = in_place ? send + static_cast<size_t>(r) * share * es : static_cast<char*>(side.alloc(share * es));
        side.put(send, values(DType::F32, share * n, r));
        staged.reduce_scatter(send, recv, share, DType::F32, comm::ReduceOp::Sum, "staged rs");
        EXPECT_EQ(side.get(recv, share * es), ref_out) << "reduce_scatter in_place " << in_place;

        std::vector<char> mine = values(DType::F32, share, r, 3), ref_all(total);
        world_->allgather(mine.data(), ref_all.data(), share, DType::F32, "reference");
        char* out = static_cast<char*>(side.alloc(total));
        char* in = in_place ? out + static_cast<size_t>(r) * share * es : static_cast<char*>(side.alloc(share * es));
        side.put(in, mine);
        staged.allgather(in, out, share, DType::F32, "staged ag");
        EXPECT_EQ(side.get(out, total), ref_all) << "allgather in_place " << in_place;
        if (!in_place) {
          side.free(recv);
          side.free(in);
        }
        side.free(send);
        side.free(out);
      }
    }
}

TEST_F(Staged, UnevenFormsWithARankThatHoldsNothing) {
  const int n = world_->size(), r = world_->rank();
  std::vector<int64_t> counts(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) counts[static_cast<size_t>(i)] = i == 1 ? 0 : 100 + 17 * i;  // rank 1: none
  int64_t total = 0, before = 0;
  for (int i = 0; i < n; ++i) {
    if (i < r) before += counts[static_cast<size_t>(i)];
    total += counts[static_cast<size_t>(i)];
  }
  const int64_t mine = counts[static_cast<size_t>(r)];
  for (const Side& side : sides())
    for (const StagingPlan& plan : plans()) {
      HostStagedCommunicator staged(*world_, side.exec, "staged", plan);
      for (DType dt : {DType::F32, DType::BF16}) {
        const size_t es = dtype_size(dt);
        std::vector<char> ref = values(dt, total, r), ref_out(static_cast<size_t>(std::max<int64_t>(mine, 1)) * es);
        world_->reduce_scatter_v_async(ref.data(), ref_out.data(), counts, dt, comm::ReduceOp::Sum, "reference")
            ->wait();
        void* send = side.alloc(static_cast<size_t>(total) * es);
        void* recv = side.alloc(static_cast<size_t>(std::max<int64_t>(mine, 1)) * es);
        side.put(send, values(dt, total, r));
        staged.reduce_scatter_v_async(send, recv, counts, dt, comm::ReduceOp::Sum, "staged rs_v")->wait();
        EXPECT_EQ(side.get(recv, static_cast<size_t>(mine) * es),
                  std::vector<char>(ref_out.begin(), ref_out.begin() + static_cast<long>(mine * es)));

        std::vector<char> part = values(dt, mine, r, 5), ref_all(static_cast<size_t>(total) * es);
        world_->allgather_v_async(part.data(), ref_all.data(), counts, dt, "reference")->wait();
        char* out = static_cast<char*>(side.alloc(static_cast<size_t>(total) * es));
        if (mine > 0) side.put(out + static_cast<size_t>(before) * es, part);  // in place
        staged.allgather_v_async(out + static_cast<size_t>(before) * es, out, counts, dt, "staged ag_v")->wait();
        EXPECT_EQ(side.get(out, static_cast<size_t>(total) * es), ref_all);
        side.free(send);
        side.free(recv);
        side.free(out);
      }
    }
}

TEST_F(Staged, BroadcastFromEveryRootAndARingOfSends) {
  const int n = world_->size(), r = world_->rank();
  const int64_t count = 4097;
  const size_t bytes = static_cast<size_t>(count) * 4;
  for (const Side& side : sides())
    for (const StagingPlan& plan : plans()) {
      HostStagedCommunicator staged(*world_, side.exec, "staged", plan);
      staged.reserve_p2p(2, bytes);  // the ring's receive and send, each whole
      EXPECT_EQ(staged.staging_bytes(), plan.bytes() + 2 * ((bytes + 4095) / 4096 * 4096));
      void* buf = side.alloc(bytes);
      for (int root = 0; root < n; ++root) {
        side.put(buf, values(DType::F32, count, r, root));
        staged.broadcast(buf, count, DType::F32, root, "staged bcast");
        EXPECT_EQ(side.get(buf, bytes), values(DType::F32, count, root, root)) << "root " << root;
      }
      if (n > 1) {  // each rank sends to the next and receives from the previous; both posted before either waits
        void* out = side.alloc(bytes);
        side.put(out, values(DType::F32, count, r, 9));
        comm::WorkPtr rx = staged.recv_async(buf, count, DType::F32, (r + n - 1) % n, 7, "ring recv");
        comm::WorkPtr tx = staged.send_async(out, count, DType::F32, (r + 1) % n, 7, "ring send");
        EXPECT_EQ(staged.staging_blocks_in_use(), 2u);  // the two p2p blocks; the slots stay free
        tx->wait();
        rx->wait();
        EXPECT_EQ(side.get(buf, bytes), values(DType::F32, count, (r + n - 1) % n, 9));
        side.free(out);
      }
      staged.barrier("staged barrier");
      side.free(buf);
    }
}

TEST_F(Staged, SlotsAreFixedReusedAndTheOldestCompletesWhenAllAreHeld) {
  for (const Side& side : sides())
    for (const StagingPlan& plan : plans()) {
      HostStagedCommunicator staged(*world_, side.exec, "staged", plan);
      const int64_t n = 10000;
      const size_t bytes = static_cast<size_t>(n) * 4;
      void* buf[3] = {side.alloc(bytes), side.alloc(bytes), side.alloc(bytes)};
      for (int round = 0; round < 2; ++round) {
        for (int i = 0; i < 3; ++i) side.put(buf[i], values(DType::F32, n, world_->rank(), i));
        comm::WorkPtr w0 = staged.allreduce_async(buf[0], n, DType::F32, comm::ReduceOp::Sum, "a");
        comm::WorkPtr w1 = staged.allreduce_async(buf[1], n, DType::F32, comm::ReduceOp::Sum, "b");
        // whole in a slot, both stay in flight; in chunks, the first completed before the second was posted (the
        // ordering of chunked collectives)
        const size_t held = bytes <= plan.slot_bytes ? 2u : 1u;
        EXPECT_EQ(staged.staging_blocks_in_use(), held);
        // both slots held: posting a third completes the oldest first (its Work is then done)
        comm::WorkPtr w2 = staged.allreduce_async(buf[2], n, DType::F32, comm::ReduceOp::Sum, "c");
        EXPECT_TRUE(w0->test());
        EXPECT_EQ(staged.staging_blocks_in_use(), held);
        w2->wait();
        w1.reset();  // destroyed unwaited: it completes, and its result reaches the buffer
        EXPECT_EQ(staged.staging_blocks_in_use(), 0u);
        EXPECT_EQ(staged.staging_blocks(), 2u);  // fixed: nothing allocated past construction
        EXPECT_EQ(staged.staging_bytes(), plan.bytes());
        for (int i = 0; i < 3; ++i) {
          std::vector<char> want = values(DType::F32, n, world_->rank(), i);
          world_->allreduce(want.data(), n, DType::F32, comm::ReduceOp::Sum, "reference");
          EXPECT_EQ(side.get(buf[i], bytes), want) << "operation " << i;
        }
      }
      // progress() drives chunked operations to completion without a wait
      side.put(buf[0], values(DType::F32, n, world_->rank(), 7));
      comm::WorkPtr w = staged.allreduce_async(buf[0], n, DType::F32, comm::ReduceOp::Sum, "progress");
      while (!w->test()) staged.progress();
      std::vector<char> want = values(DType::F32, n, world_->rank(), 7);
      world_->allreduce(want.data(), n, DType::F32, comm::ReduceOp::Sum, "reference");
      EXPECT_EQ(side.get(buf[0], bytes), want);
      for (void* b : buf) side.free(b);
    }
}

TEST_F(Staged, ChunkedCollectivesPostedBackToBackKeepTheirOrderOnEveryRank) {
  // Rank 0 drives the first operation's chunks ahead before posting the second, the others do not: without the
  // ordering rule MPI would match one rank's chunk of the first with another's chunk of the second.
  StagingPlan tiny;
  tiny.slots = 2;
  tiny.slot_bytes = 128;
  HostStagedCommunicator staged(*world_, ExecContext{}, "staged", tiny);
  const int64_t n = 3000;
  std::vector<float> a(n), b(n), want_a(n), want_b(n);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = want_a[i] = static_cast<float>((i + world_->rank()) % 13);
    b[i] = want_b[i] = static_cast<float>((2 * i + world_->rank()) % 7);
  }
  world_->allreduce(want_a.data(), n, DType::F32, comm::ReduceOp::Sum, "reference");
  world_->allreduce(want_b.data(), n, DType::F32, comm::ReduceOp::Max, "reference");
  for (int round = 0; round < 3; ++round) {
    std::vector<float> x = a, y = b;
    comm::WorkPtr wa = staged.allreduce_async(x.data(), n, DType::F32, comm::ReduceOp::Sum, "first");
    if (world_->rank() == 0)
      for (int i = 0; i < 50; ++i) staged.progress();
    comm::WorkPtr wb = staged.allreduce_async(y.data(), n, DType::F32, comm::ReduceOp::Max, "second");
    wb->wait();
    wa->wait();
    EXPECT_EQ(x, want_a);
    EXPECT_EQ(y, want_b);
  }
}

TEST_F(Staged, AReceiveWithoutAReservedBlockNeedsASlotAndSaysSo) {
  HostStagedCommunicator pipe(*world_, ExecContext{}, "pp", StagingPlan{});  // the pipeline's group: no slots
  std::vector<float> buf(16);
  try {
    pipe.recv_async(buf.data(), 16, DType::F32, 0, 3, "an unplanned transfer");
    FAIL() << "a receive with neither a p2p block nor a slot was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no staging slot"), std::string::npos) << e.what();
  }
}

TEST_F(Staged, CountsTheSameVolumeAsMpi) {
  HostStagedCommunicator staged(*world_, ExecContext{}, "staged", collective_staging());
  auto reference = comm::make_world_communicator(test_options());
  const int n = world_->size();
  std::vector<float> buf(static_cast<size_t>(64) * n), out(64);
  for (comm::Communicator* c :
       {static_cast<comm::Communicator*>(&staged), static_cast<comm::Communicator*>(reference.get())}) {
    c->allreduce(buf.data(), 64, DType::F32, comm::ReduceOp::Sum, "v");
    c->reduce_scatter(buf.data(), out.data(), 64, DType::F32, comm::ReduceOp::Sum, "v");
    c->allgather(out.data(), buf.data(), 64, DType::F32, "v");
    c->broadcast(buf.data(), 10, DType::F32, 0, "v");
  }
  EXPECT_EQ(staged.volume().allreduce, reference->volume().allreduce);
  EXPECT_EQ(staged.volume().reduce_scatter, reference->volume().reduce_scatter);
  EXPECT_EQ(staged.volume().allgather, reference->volume().allgather);
  EXPECT_EQ(staged.volume().broadcast, reference->volume().broadcast);
}

TEST_F(Staged, Fp16SumsOfSmallIntegersAreExact) {
  // every partial sum of integers below 2^11 is exact in fp16: whatever MPI's order, the result is exact
  HostStagedCommunicator staged(*world_, ExecContext{}, "staged", collective_staging());
  std::vector<fp16> v(300);
  for (size_t i = 0; i < v.size(); ++i) v[i] = to_fp16(static_cast<float>((i % 50) + world_->rank()));
  staged.allreduce(v.data(), static_cast<int64_t>(v.size()), DType::F16, comm::ReduceOp::Sum, "fp16");
  const int n = world_->size();
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_EQ(to_f32(v[i]), static_cast<float>(n * static_cast<int>(i % 50) + n * (n - 1) / 2)) << i;
}

}  // namespace
}  // namespace hpct::parallel
