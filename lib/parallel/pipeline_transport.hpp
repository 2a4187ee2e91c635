#pragma once
// How a pipeline rank exchanges activations and gradients with its neighbours (the executor's four transfers,
// parallel/pipeline_schedule.hpp), behind one interface with two implementations (docs/style.md: swappable concerns).
// A transport is built for p ranks and v virtual stages per rank (v = 1: the plain pipeline). Every transfer names the
// calling rank's model chunk and the micro-batch; activations go to rank r + 1 and come from rank r - 1, gradients the
// reverse, modulo p when v > 1: the last rank's chunk c sends its activation to rank 0's chunk c + 1 (the wrap) and
// rank 0's chunk c + 1 its gradient back to the last rank's chunk c.
//
//  - MpiPipelineTransport: host buffers over the pp group (an MpiCommunicator), tagged so that receives may be posted
//    in any order. A transfer crosses the boundary between virtual stages s and s + 1; call cb the chunk of the lower
//    one, s (the sender's chunk for an activation, the receiver's for a gradient; the other side computes it from its
//    own chunk: its chunk, or its chunk - 1 across the wrap). Tag 2 (j v + cb) for the activation and 2 (j v + cb) + 1
//    for the gradient of micro-batch j (v = 1: 2j and 2j + 1). Why the chunk must be in the tag: the messages from
//    rank r to rank r + 1 carry the activations of every chunk of r, and at p = 2 the same ordered pair also carries
//    the wrap's gradients (rank 0 -> rank 1 takes chunk c's activations and chunk c + 1's gradients to rank 1's chunk
//    c): with tags 2j / 2j + 1 alone two chunks' activations of micro-batch j would be indistinguishable. With cb,
//    (j, cb, direction) is unique per ordered pair of ranks, and the parity keeps the directions apart at p = 2.
//    The CPU backend's transport, and the reference one; over a host-staged pp group (parallel/staged_communicator.hpp)
//    the transport of CUDA's comm.backend = mpi, with device buffers.
//  - LinkPipelineTransport: one 2-rank communicator per link and direction: for each neighbour pair (s, s+1) of a pp
//    group one for the activations s -> s+1 and one for the gradients s+1 -> s, and with v > 1 the wrap link
//    (p-1, 0): activations p-1 -> 0 and gradients 0 -> p-1, communicators of their own even at p = 2 (where the wrap
//    joins the same two ranks as link 0-1, in the other direction). On CUDA these are NcclCommunicators,
//    each with its own stream (ParallelContext builds them), so buffers are device memory and completion is
//    stream-ordered on the compute stream (their input stream): sends start after the kernels that produced the
//    buffer, Work::wait() makes the compute stream wait. NCCL matches sends and receives by order, per communicator,
//    and a send holds its stream until the peer's receive runs: with one communicator (one stream) per link and
//    direction, every stream carries the operations of one direction of one link, in the executor's order, so they
//    always match and a send blocks no other transfer (no head-of-line blocking between directions or links). Tags are
//    not used (0 everywhere): over MPI link communicators (the CPU tests) MPI then matches by order too, exactly as
//    NCCL does. Each rank has exactly one incoming and one outgoing communicator per kind (activations from r - 1,
//    to r + 1; gradients the reverse), so the chunk selects no link: it only names the transfer.
//    Contract for the caller (the executor keeps it, and its header proves it for the interleaved order): on each rank
//    the activation receives are issued in the order the previous rank issues its activation sends (forward order),
//    and the gradient receives in the order the next rank issues its gradient sends (backward order).
//
// Link construction (split_pipeline_links): two MPI_Comm_split of the pp group, one for the even links (stages 2i and
// 2i + 1) and one for the odd links (2i + 1 and 2i + 2), key = stage (the lower stage is rank 0 of its link); every
// stage gets its link to the previous and to the next stage (none at the ends; pp = 1 has no links at all). With the
// wrap (v > 1) a third split joins stages p - 1 (rank 0, the sender of activations, as the lower stage of a link is)
// and 0 (rank 1). Which stages pair and with which colours is the pure pipeline_link_plan() (unit-tested).
// Communicators bootstrapped over the links (NCCL) are created even links first, then odd links, then the wrap, on
// every rank: each phase joins disjoint pairs, so the collective initialisations cannot wait on each other in a cycle.
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
  // Model chunks per rank the transport was built for (1: no wrap link).
  virtual int virtual_stages() const = 0;
  // The activation of micro-batch `micro` (n elements of dtype: F32, or BF16 / F16 under train.precision = bf16 / fp16)
  // of this rank's chunk `chunk`: its output, to the next virtual stage (rank stage()+1, or rank 0's chunk + 1 from
  // the last rank) / its input, from the previous virtual stage (rank stage()-1, or the last rank's chunk - 1 on rank
  // 0). Both sides of a link pass the same n and dtype (a receive of another element count is an error naming both;
  // the element size is not checked across ranks, so the executor checks its stage's dtype).
  virtual comm::WorkPtr send_activation(const void* buf, int64_t n, DType dtype, int chunk, int micro,
                                        const std::string& what) = 0;
  virtual comm::WorkPtr recv_activation(void* buf, int64_t n, DType dtype, int chunk, int micro,
                                        const std::string& what) = 0;
  // The gradient of micro-batch `micro` (w.r.t. the activation; the activation's dtype) of this rank's chunk `chunk`:
  // w.r.t. its input, to the previous virtual stage / w.r.t. its output, from the next virtual stage.
  virtual comm::WorkPtr send_gradient(const void* buf, int64_t n, DType dtype, int chunk, int micro,
                                      const std::string& what) = 0;
  virtual comm::WorkPtr recv_gradient(void* buf, int64_t n, DType dtype, int chunk, int micro,
                                      const std::string& what) = 0;
  // Drives the transfers in flight (MPI progresses only inside MPI calls, docs/platform.md).
  virtual void progress() = 0;
  // A host barrier over the pp group (the executor's entry and exit barriers).
  virtual void barrier(const std::string& what) = 0;
  // "MPI pp group (host buffers, tags 2j / 2j+1)", "links: activations ... (NCCL, device buffers)" (logs).
  virtual std::string describe() const = 0;
};

// Buffers on pp.device() over the pp group (MPI, or MPI behind host staging); tags 2 (j v + cb) (activation) and 2 (j v + cb) + 1 (gradient) of micro-batch j
// across the boundary whose lower virtual stage is chunk cb (see above). virtual_stages > 1 needs pp.size() > 1.
class MpiPipelineTransport final : public PipelineTransport {
 public:
  explicit MpiPipelineTransport(comm::Communicator& pp, int virtual_stages = 1);
  Device device() const override { return pp_.device(); }
  int stage() const override { return pp_.rank(); }
  int stages() const override { return pp_.size(); }
  int virtual_stages() const override { return chunks_; }
  comm::WorkPtr send_activation(const void* buf, int64_t n, DType dtype, int chunk, int micro,
                                const std::string& what) override;
  comm::WorkPtr recv_activation(void* buf, int64_t n, DType dtype, int chunk, int micro,
                                const std::string& what) override;
  comm::WorkPtr send_gradient(const void* buf, int64_t n, DType dtype, int chunk, int micro,
                              const std::string& what) override;
  comm::WorkPtr recv_gradient(void* buf, int64_t n, DType dtype, int chunk, int micro,
                              const std::string& what) override;
  void progress() override { pp_.progress(); }
  void barrier(const std::string& what) override { pp_.barrier(what); }
  std::string describe() const override;

 private:
  // The tag of micro-batch `micro` across the boundary whose lower virtual stage is chunk `lower_chunk` of its rank.
  int tag(int lower_chunk, int micro, bool gradient) const;
  comm::Communicator& pp_;
  int chunks_ = 1;
};

// One 2-rank communicator per link and direction (see above): act_prev carries the activations from stage-1 (this
// stage is its rank 1), grad_prev the gradients to stage-1, act_next the activations to stage+1 (this stage is rank 0),
// grad_next the gradients from stage+1. With virtual_stages = 1 they are null where there is no neighbour; with
// virtual_stages > 1 every rank has all four, the first rank's prev and the last rank's next being the wrap link
// (p-1, 0), on which the last rank is rank 0. All on one device. host_pp: the pp group (MPI), for the barriers and the
// stage numbers. The communicators must outlive the transport.
class LinkPipelineTransport final : public PipelineTransport {
 public:
  LinkPipelineTransport(comm::Communicator& host_pp, comm::Communicator* act_prev, comm::Communicator* grad_prev,
                        comm::Communicator* act_next, comm::Communicator* grad_next, int virtual_stages = 1);
  Device device() const override { return device_; }
  int stage() const override { return host_pp_.rank(); }
  int stages() const override { return host_pp_.size(); }
  int virtual_stages() const override { return chunks_; }
  comm::WorkPtr send_activation(const void* buf, int64_t n, DType dtype, int chunk, int micro,
                                const std::string& what) override;
  comm::WorkPtr recv_activation(void* buf, int64_t n, DType dtype, int chunk, int micro,
                                const std::string& what) override;
  comm::WorkPtr send_gradient(const void* buf, int64_t n, DType dtype, int chunk, int micro,
                              const std::string& what) override;
  comm::WorkPtr recv_gradient(void* buf, int64_t n, DType dtype, int chunk, int micro,
                              const std::string& what) override;
  void progress() override;
  void barrier(const std::string& what) override { host_pp_.barrier(what); }
  std::string describe() const override;

 private:
  comm::Communicator& link_(comm::Communicator* c, const char* role) const;
  comm::Communicator& host_pp_;
  comm::Communicator *act_prev_, *grad_prev_, *act_next_, *grad_next_;
  int chunks_ = 1;
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

// The 2-rank link communicators of this stage (MPI), from the two splits of pp, and with wrap (for v > 1, pp > 1) a
// third one (collective over pp: every stage calls it, with the same wrap). prev: stages (stage-1, stage), this stage
// is its rank 1; next: (stage, stage+1), this stage is its rank 0; named "pp link <s>-<s+1>". wrap: on the first and
// the last stage only, (p-1, 0), the last stage its rank 0, named "pp link <p-1>-0 (wrap)".
struct PipelineLinks {
  std::unique_ptr<comm::MpiCommunicator> prev, next, wrap;
  bool prev_in_even = false;  // which split gave each (communicators bootstrapped over the links are created in split
  bool next_in_even = false;  // order: even links first, then odd links, then the wrap)
  // The link that carries this stage's activations in and gradients out (prev, or the wrap on the first stage), and
  // the one for activations out and gradients in (next, or the wrap on the last stage); null where none.
  comm::MpiCommunicator* to_prev() const { return prev ? prev.get() : wrap.get(); }
  comm::MpiCommunicator* to_next() const { return next ? next.get() : wrap.get(); }
};
PipelineLinks split_pipeline_links(const comm::MpiCommunicator& pp, bool wrap = false);

}  // namespace hpct::parallel
