#pragma once
// How a pipeline stage exchanges activations and gradients with its neighbours (the executor's four transfers,
// parallel/pipeline_schedule.hpp), behind one interface with two implementations (docs/style.md: swappable concerns):
//
//  - MpiPipelineTransport: host buffers over the pp group (an MpiCommunicator): tags 2j for the activation and 2j + 1
//    for the gradient of micro-batch j, so receives may be posted in any order. The CPU backend's transport, and the
//    reference one.
//  - LinkPipelineTransport: one 2-rank communicator per link and direction: for each neighbour pair (s, s+1) of a pp
//    group one for the activations s -> s+1 and one for the gradients s+1 -> s. On CUDA these are NcclCommunicators,
//    each with its own stream (ParallelContext builds them), so buffers are device memory and completion is
//    stream-ordered on the compute stream (their input stream): sends start after the kernels that produced the
//    buffer, Work::wait() makes the compute stream wait. NCCL matches sends and receives by order, per communicator,
//    and a send holds its stream until the peer's receive runs: with one communicator (one stream) per link and
//    direction, every stream carries the operations of one direction of one link, in micro-batch order, so they
//    always match and a send blocks no other transfer (no head-of-line blocking between directions or links). Tags are
//    not used (0 everywhere): over MPI link communicators (the CPU tests) MPI then matches by order too, exactly as
//    NCCL does.
//    Contract for the caller (the executor keeps it): on each stage the activation receives are issued in the order
//    the previous stage issues its activation sends (forward order), and the gradient receives in the order the next
//    stage issues its gradient sends (backward order).
//
// Link construction (split_pipeline_links): two MPI_Comm_split of the pp group, one for the even links (stages 2i and
// 2i + 1) and one for the odd links (2i + 1 and 2i + 2), key = stage (the lower stage is rank 0 of its link); every
// stage gets its link to the previous and to the next stage (none at the ends; pp = 1 has no links at all). Which
// stages pair and with which colours is the pure pipeline_link_plan() (unit-tested). Communicators bootstrapped over
// the links (NCCL) are created even links first, then odd links, on every rank: each phase joins disjoint pairs, so the
// collective initialisations cannot wait on each other in a cycle.
#include <memory>
#include <string>

#include "comm/communicator.hpp"
#include "comm/mpi_communicator.hpp"

namespace hpct::parallel {

class PipelineTransport {
 public:
  virtual ~PipelineTransport() = default;
  virtual Device device() const = 0;  // where the executor's buffers live
  virtual int stage() const = 0;
  virtual int stages() const = 0;
  // The activation of micro-batch `micro` (n elements of dtype: F32, or BF16 / F16 under train.precision = bf16 / fp16)
  // to stage()+1 / from stage()-1. Both sides of a link pass the same n and dtype (a receive of another element count
  // is an error naming both; the element size is not checked across ranks, so the executor checks its stage's dtype).
  virtual comm::WorkPtr send_activation(const void* buf, int64_t n, DType dtype, int micro,
                                        const std::string& what) = 0;
  virtual comm::WorkPtr recv_activation(void* buf, int64_t n, DType dtype, int micro, const std::string& what) = 0;
  // The gradient of micro-batch `micro` (w.r.t. the activation; the activation's dtype) to stage()-1 / from stage()+1.
  virtual comm::WorkPtr send_gradient(const void* buf, int64_t n, DType dtype, int micro, const std::string& what) = 0;
  virtual comm::WorkPtr recv_gradient(void* buf, int64_t n, DType dtype, int micro, const std::string& what) = 0;
  // Drives the transfers in flight (MPI progresses only inside MPI calls, docs/platform.md).
  virtual void progress() = 0;
  // A host barrier over the pp group (the executor's entry and exit barriers).
  virtual void barrier(const std::string& what) = 0;
  // "MPI pp group (host buffers, tags 2j / 2j+1)", "links: activations ... (NCCL, device buffers)" (logs).
  virtual std::string describe() const = 0;
};

// Host buffers over the pp group; tags 2j (activation) and 2j + 1 (gradient) of micro-batch j.
class MpiPipelineTransport final : public PipelineTransport {
 public:
  explicit MpiPipelineTransport(comm::Communicator& pp);
  Device device() const override { return Device::CPU; }
  int stage() const override { return pp_.rank(); }
  int stages() const override { return pp_.size(); }
  comm::WorkPtr send_activation(const void* buf, int64_t n, DType dtype, int micro, const std::string& what) override;
  comm::WorkPtr recv_activation(void* buf, int64_t n, DType dtype, int micro, const std::string& what) override;
  comm::WorkPtr send_gradient(const void* buf, int64_t n, DType dtype, int micro, const std::string& what) override;
  comm::WorkPtr recv_gradient(void* buf, int64_t n, DType dtype, int micro, const std::string& what) override;
  void progress() override { pp_.progress(); }
  void barrier(const std::string& what) override { pp_.barrier(what); }
  std::string describe() const override;

 private:
  comm::Communicator& pp_;
};

// One 2-rank communicator per link and direction (see above): act_prev carries the activations from stage-1 (this
// stage is its rank 1), grad_prev the gradients to stage-1, act_next the activations to stage+1 (this stage is rank 0),
// grad_next the gradients from stage+1. Null where there is no neighbour. All on one device. host_pp: the pp group
// (MPI), for the barriers and the stage numbers. The communicators must outlive the transport.
class LinkPipelineTransport final : public PipelineTransport {
 public:
  LinkPipelineTransport(comm::Communicator& host_pp, comm::Communicator* act_prev, comm::Communicator* grad_prev,
                        comm::Communicator* act_next, comm::Communicator* grad_next);
  Device device() const override { return device_; }
  int stage() const override { return host_pp_.rank(); }
  int stages() const override { return host_pp_.size(); }
  comm::WorkPtr send_activation(const void* buf, int64_t n, DType dtype, int micro, const std::string& what) override;
  comm::WorkPtr recv_activation(void* buf, int64_t n, DType dtype, int micro, const std::string& what) override;
  comm::WorkPtr send_gradient(const void* buf, int64_t n, DType dtype, int micro, const std::string& what) override;
  comm::WorkPtr recv_gradient(void* buf, int64_t n, DType dtype, int micro, const std::string& what) override;
  void progress() override;
  void barrier(const std::string& what) override { host_pp_.barrier(what); }
  std::string describe() const override;

 private:
  comm::Communicator& link_(comm::Communicator* c, const char* role) const;
  comm::Communicator& host_pp_;
  comm::Communicator *act_prev_, *grad_prev_, *act_next_, *grad_next_;
  Device device_ = Device::CPU;
};

// Which links stage `stage` of a pp group of pp_size stages takes part in (pure). Link l joins stages l and l + 1
// (0 <= l < pp_size - 1). Even split: link 2i has colour i; odd split: link 2i + 1 has colour i; -1 = not in any link
// of that split (MPI_UNDEFINED).
struct PipelineLinkPlan {
  int even_colour = -1;
  int odd_colour = -1;
  int prev_link = -1;         // the link to stage - 1 (index), -1 on the first stage
  int next_link = -1;         // the link to stage + 1, -1 on the last stage
  bool prev_in_even = false;  // the link to stage - 1 comes from the even split (else the odd one)
  bool next_in_even = false;  // the link to stage + 1 comes from the even split
  bool operator==(const PipelineLinkPlan&) const = default;
};
PipelineLinkPlan pipeline_link_plan(int pp_size, int stage);

// The 2-rank link communicators of this stage (MPI), from the two splits of pp (collective over pp: every stage calls
// it). prev: stages (stage-1, stage), this stage is its rank 1; next: (stage, stage+1), this stage is its rank 0.
// Named "pp link <s>-<s+1>".
struct PipelineLinks {
  std::unique_ptr<comm::MpiCommunicator> prev, next;
  bool prev_in_even = false;  // which split gave each (communicators bootstrapped over the links are created in split
  bool next_in_even = false;  // order: even links first, then odd links)
};
PipelineLinks split_pipeline_links(const comm::MpiCommunicator& pp);

}  // namespace hpct::parallel
