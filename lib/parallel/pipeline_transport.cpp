#include "parallel/pipeline_transport.hpp"

#include "parallel/staged_communicator.hpp"

#include <mpi.h>

#include "core/error.hpp"

namespace hpct::parallel {

// ---- MPI over the pp group ------------------------------------------------------------------------------------------

namespace {
constexpr int kMaxTag = 32767;  // the MPI standard's guaranteed minimum of MPI_TAG_UB
}  // namespace

MpiPipelineTransport::MpiPipelineTransport(comm::Communicator& pp, int virtual_stages)
    : pp_(pp), chunks_(virtual_stages) {
  // the tags need MPI's matching: an MpiCommunicator (host buffers) or the host-staged one over MPI (device buffers)
  HPCT_CHECK(
      pp.device() == Device::CPU || dynamic_cast<const HostStagedCommunicator*>(&pp) != nullptr,
      "MpiPipelineTransport: the {} communicator is on {} and not host-staged: it matches by tag, which only MPI "
      "does",
      pp.name(), device_name(pp.device()));
  HPCT_CHECK(virtual_stages >= 1 && (virtual_stages == 1 || pp.size() > 1),
             "MpiPipelineTransport: {} virtual stages per rank over {} ranks (interleaving needs at least 2)",
             virtual_stages, pp.size());
}

int MpiPipelineTransport::tag(int lower_chunk, int micro, bool gradient) const {
  HPCT_CHECK(lower_chunk >= 0 && lower_chunk < chunks_, "pipeline transfer across chunk {} of {}", lower_chunk,
             chunks_);
  const int64_t t = 2 * (static_cast<int64_t>(micro) * chunks_ + lower_chunk) + (gradient ? 1 : 0);
  HPCT_CHECK(micro >= 0 && t <= kMaxTag,
             "micro-batch {} of {} chunks: the MPI pipeline transport tags 2 per (chunk, micro-batch) and MPI "
             "guarantees tags up to {}",
             micro, chunks_, kMaxTag);
  return static_cast<int>(t);
}

// The peers are the neighbours on the ring of ranks (with v = 1 the executor never sends past the ends). The lower
// chunk of a boundary crossed into or out of rank 0 from below is the last rank's chunk - 1 (the wrap).
comm::WorkPtr MpiPipelineTransport::send_activation(const void* buf, int64_t n, DType dtype, int chunk, int micro,
                                                    const std::string& what) {
  return pp_.send_async(buf, n, dtype, (stage() + 1) % stages(), tag(chunk, micro, false), what);
}
comm::WorkPtr MpiPipelineTransport::recv_activation(void* buf, int64_t n, DType dtype, int chunk, int micro,
                                                    const std::string& what) {
  const int lower = stage() == 0 ? chunk - 1 : chunk;
  return pp_.recv_async(buf, n, dtype, (stage() + stages() - 1) % stages(), tag(lower, micro, false), what);
}
comm::WorkPtr MpiPipelineTransport::send_gradient(const void* buf, int64_t n, DType dtype, int chunk, int micro,
                                                  const std::string& what) {
  const int lower = stage() == 0 ? chunk - 1 : chunk;
  return pp_.send_async(buf, n, dtype, (stage() + stages() - 1) % stages(), tag(lower, micro, true), what);
}
comm::WorkPtr MpiPipelineTransport::recv_gradient(void* buf, int64_t n, DType dtype, int chunk, int micro,
                                                  const std::string& what) {
  return pp_.recv_async(buf, n, dtype, (stage() + 1) % stages(), tag(chunk, micro, true), what);
}

std::string MpiPipelineTransport::describe() const {
  if (chunks_ == 1)
    return fmt::format("MPI over the {} group (host buffers; tags 2j activation, 2j+1 gradient)", pp_.name());
  return fmt::format("MPI over the {} group, {} virtual stages per rank (host buffers; tags 2(jv+c) activation, "
                     "2(jv+c)+1 gradient, c the lower chunk)",
                     pp_.name(), chunks_);
}

// ---- one communicator per link and direction -----------------------------------------------------------------------

LinkPipelineTransport::LinkPipelineTransport(comm::Communicator& host_pp, comm::Communicator* act_prev,
                                             comm::Communicator* grad_prev, comm::Communicator* act_next,
                                             comm::Communicator* grad_next, int virtual_stages)
    : host_pp_(host_pp),
      act_prev_(act_prev),
      grad_prev_(grad_prev),
      act_next_(act_next),
      grad_next_(grad_next),
      chunks_(virtual_stages) {
  const int s = host_pp.rank(), p = host_pp.size();
  HPCT_CHECK(virtual_stages >= 1 && (virtual_stages == 1 || p > 1),
             "LinkPipelineTransport: {} virtual stages per rank over {} ranks (interleaving needs at least 2)",
             virtual_stages, p);
  const bool wrap = virtual_stages > 1;  // the first and the last rank are then linked too
  HPCT_CHECK((act_prev != nullptr) == (s > 0 || wrap) && (grad_prev != nullptr) == (s > 0 || wrap),
             "pipeline stage {} of {} ({} virtual stages per rank): links to the previous stage {}", s, p,
             virtual_stages, s > 0 || wrap ? "missing" : "given on the first");
  HPCT_CHECK((act_next != nullptr) == (s < p - 1 || wrap) && (grad_next != nullptr) == (s < p - 1 || wrap),
             "pipeline stage {} of {} ({} virtual stages per rank): links to the next stage {}", s, p, virtual_stages,
             s < p - 1 || wrap ? "missing" : "given on the last");
  bool first = true;
  for (auto [c, me] :
       {std::pair{act_prev, 1}, std::pair{grad_prev, 1}, std::pair{act_next, 0}, std::pair{grad_next, 0}}) {
    if (c == nullptr) continue;
    HPCT_CHECK(c->size() == 2 && c->rank() == me,
               "pipeline stage {}: link communicator {} has rank {} of {}, expected rank {} of 2 (the sender of "
               "activations is rank 0)",
               s, c->name(), c->rank(), c->size(), me);
    if (first) device_ = c->device();
    HPCT_CHECK(c->device() == device_, "pipeline stage {}: link communicators on {} and {}", s, device_name(device_),
               device_name(c->device()));
    first = false;
  }
}

comm::Communicator& LinkPipelineTransport::link_(comm::Communicator* c, const char* role) const {
  HPCT_CHECK(c != nullptr, "pipeline stage {} of {} has no {} link", stage(), stages(), role);
  return *c;
}

// The peer of a 2-rank link is rank 1 - rank(); tag 0: matched by order, as NCCL does. One link per kind and
// direction, whatever the chunk (see the header).
comm::WorkPtr LinkPipelineTransport::send_activation(const void* buf, int64_t n, DType dtype, int /*chunk*/,
                                                     int /*micro*/, const std::string& what) {
  comm::Communicator& c = link_(act_next_, "next-stage activation");
  return c.send_async(buf, n, dtype, 1 - c.rank(), 0, what);
}
comm::WorkPtr LinkPipelineTransport::recv_activation(void* buf, int64_t n, DType dtype, int /*chunk*/, int /*micro*/,
                                                     const std::string& what) {
  comm::Communicator& c = link_(act_prev_, "previous-stage activation");
  return c.recv_async(buf, n, dtype, 1 - c.rank(), 0, what);
}
comm::WorkPtr LinkPipelineTransport::send_gradient(const void* buf, int64_t n, DType dtype, int /*chunk*/,
                                                   int /*micro*/, const std::string& what) {
  comm::Communicator& c = link_(grad_prev_, "previous-stage gradient");
  return c.send_async(buf, n, dtype, 1 - c.rank(), 0, what);
}
comm::WorkPtr LinkPipelineTransport::recv_gradient(void* buf, int64_t n, DType dtype, int /*chunk*/, int /*micro*/,
                                                   const std::string& what) {
  comm::Communicator& c = link_(grad_next_, "next-stage gradient");
  return c.recv_async(buf, n, dtype, 1 - c.rank(), 0, what);
}

void LinkPipelineTransport::progress() {
  comm::Communicator* seen[4] = {nullptr, nullptr, nullptr, nullptr};
  int k = 0;
  for (comm::Communicator* c : {act_prev_, grad_prev_, act_next_, grad_next_}) {
    if (c == nullptr || c == seen[0] || c == seen[1] || c == seen[2]) continue;  // one link may carry both directions
    c->progress();
    seen[k++] = c;
  }
}

std::string LinkPipelineTransport::describe() const {
  std::string s;
  auto add = [&](comm::Communicator* c, const char* what) {
    if (c == nullptr) return;
    if (!s.empty()) s += ", ";
    s += fmt::format("{} over {}", what, c->name());
  };
  add(act_prev_, "activations in");
  add(grad_prev_, "gradients out");
  add(act_next_, "activations out");
  add(grad_next_, "gradients in");
  return fmt::format("one communicator per link and direction ({}; {} buffers, matched by order{})",
                     s.empty() ? "none: one stage" : s, device_name(device_),
                     chunks_ > 1 ? fmt::format("; {} virtual stages per rank", chunks_) : std::string());
}

// ---- link pairing ----------------------------------------------------------------------------------------------------

PipelineLinkPlan pipeline_link_plan(int pp_size, int stage) {
  HPCT_CHECK(pp_size >= 1 && stage >= 0 && stage < pp_size, "pipeline stage {} of {}", stage, pp_size);
  PipelineLinkPlan p;
  if (stage > 0) {
    p.prev_link = stage - 1;
    p.prev_in_even = p.prev_link % 2 == 0;
  }
  if (stage + 1 < pp_size) {
    p.next_link = stage;
    p.next_in_even = p.next_link % 2 == 0;
  }
  for (int link : {p.prev_link, p.next_link}) {
    if (link < 0) continue;
    if (link % 2 == 0) p.even_colour = link / 2;
    else
      p.odd_colour = (link - 1) / 2;
  }
  return p;
}

PipelineLinks split_pipeline_links(const comm::MpiCommunicator& pp, bool wrap) {
  const int s = pp.rank(), p = pp.size();
  const PipelineLinkPlan plan = pipeline_link_plan(p, s);
  auto name = [](int link) { return fmt::format("pp link {}-{}", link, link + 1); };
  // The link a split gives this stage: the one of plan.prev_link / next_link in that split (at most one each).
  auto link_in = [&](bool even) {
    return plan.prev_link >= 0 && plan.prev_in_even == even   ? plan.prev_link
           : plan.next_link >= 0 && plan.next_in_even == even ? plan.next_link
                                                              : -1;
  };
  PipelineLinks out;
  out.prev_in_even = plan.prev_in_even;
  out.next_in_even = plan.next_in_even;
  for (bool even : {true, false}) {  // collective over pp, the same order on every stage
    const int colour = even ? plan.even_colour : plan.odd_colour;
    const int link = link_in(even);
    std::unique_ptr<comm::MpiCommunicator> c = pp.split(colour >= 0 ? colour : MPI_UNDEFINED, s,
                                                        link >= 0 ? name(link) : std::string("pp link none"));
    HPCT_CHECK((c != nullptr) == (link >= 0), "pipeline stage {} of {}: {} split gave {} communicator", s, p,
               even ? "even" : "odd", c ? "a" : "no");
    if (!c) continue;
    HPCT_CHECK(c->size() == 2, "pipeline stage {} of {}: link {} has {} ranks", s, p, link, c->size());
    if (link == plan.prev_link) out.prev = std::move(c);
    else
      out.next = std::move(c);
  }
  if (wrap) {  // the same on every stage: the third split, after the even and the odd one
    HPCT_CHECK(p > 1, "pipeline of one stage: no wrap link");
    const bool ends = s == 0 || s == p - 1;
    // key: the last stage first, so that it is rank 0 (it sends the activations, as the lower stage of a link does)
    out.wrap = pp.split(ends ? 0 : MPI_UNDEFINED, s == p - 1 ? 0 : 1,
                        ends ? fmt::format("pp link {}-0 (wrap)", p - 1) : std::string("pp link none"));
    HPCT_CHECK((out.wrap != nullptr) == ends && (!ends || out.wrap->size() == 2),
               "pipeline stage {} of {}: the wrap split gave {}", s, p, out.wrap ? "a communicator" : "none");
  }
  return out;
}

}  // namespace hpct::parallel
