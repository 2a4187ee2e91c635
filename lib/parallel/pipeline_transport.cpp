#include "parallel/pipeline_transport.hpp"

#include <mpi.h>

#include "core/error.hpp"

namespace hpct::parallel {

// ---- MPI over the pp group ------------------------------------------------------------------------------------------

namespace {
constexpr int kMaxTag = 32767;  // the MPI standard's guaranteed minimum of MPI_TAG_UB
int act_tag(int micro) { return 2 * micro; }
int grad_tag(int micro) { return 2 * micro + 1; }
void check_tag(int micro) {
  HPCT_CHECK(micro >= 0 && grad_tag(micro) <= kMaxTag,
             "micro-batch {}: the MPI pipeline transport tags 2 per micro-batch and MPI guarantees tags up to {}",
             micro, kMaxTag);
}
}  // namespace

MpiPipelineTransport::MpiPipelineTransport(comm::Communicator& pp) : pp_(pp) {
  HPCT_CHECK(pp.device() == Device::CPU, "MpiPipelineTransport: the {} communicator is on {}; it takes host buffers",
             pp.name(), device_name(pp.device()));
}

comm::WorkPtr MpiPipelineTransport::send_activation(const void* buf, int64_t n, DType dtype, int micro,
                                                    const std::string& what) {
  check_tag(micro);
  return pp_.send_async(buf, n, dtype, stage() + 1, act_tag(micro), what);
}
comm::WorkPtr MpiPipelineTransport::recv_activation(void* buf, int64_t n, DType dtype, int micro,
                                                    const std::string& what) {
  check_tag(micro);
  return pp_.recv_async(buf, n, dtype, stage() - 1, act_tag(micro), what);
}
comm::WorkPtr MpiPipelineTransport::send_gradient(const void* buf, int64_t n, DType dtype, int micro,
                                                  const std::string& what) {
  check_tag(micro);
  return pp_.send_async(buf, n, dtype, stage() - 1, grad_tag(micro), what);
}
comm::WorkPtr MpiPipelineTransport::recv_gradient(void* buf, int64_t n, DType dtype, int micro,
                                                  const std::string& what) {
  check_tag(micro);
  return pp_.recv_async(buf, n, dtype, stage() + 1, grad_tag(micro), what);
}

std::string MpiPipelineTransport::describe() const {
  return fmt::format("MPI over the {} group (host buffers; tags 2j activation, 2j+1 gradient)", pp_.name());
}

// ---- one communicator per link and direction -----------------------------------------------------------------------

LinkPipelineTransport::LinkPipelineTransport(comm::Communicator& host_pp, comm::Communicator* act_prev,
                                             comm::Communicator* grad_prev, comm::Communicator* act_next,
                                             comm::Communicator* grad_next)
    : host_pp_(host_pp), act_prev_(act_prev), grad_prev_(grad_prev), act_next_(act_next), grad_next_(grad_next) {
  const int s = host_pp.rank(), p = host_pp.size();
  HPCT_CHECK((act_prev != nullptr) == (s > 0) && (grad_prev != nullptr) == (s > 0),
             "pipeline stage {} of {}: links to the previous stage {}", s, p, s > 0 ? "missing" : "given on the first");
  HPCT_CHECK((act_next != nullptr) == (s < p - 1) && (grad_next != nullptr) == (s < p - 1),
             "pipeline stage {} of {}: links to the next stage {}", s, p, s < p - 1 ? "missing" : "given on the last");
  bool first = true;
  for (auto [c, me] :
       {std::pair{act_prev, 1}, std::pair{grad_prev, 1}, std::pair{act_next, 0}, std::pair{grad_next, 0}}) {
    if (c == nullptr) continue;
    HPCT_CHECK(c->size() == 2 && c->rank() == me,
               "pipeline stage {}: link communicator {} has rank {} of {}, expected rank {} of 2 (the lower stage is "
               "rank 0)",
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

// The peer of a 2-rank link is rank 1 - rank(); tag 0: matched by order, as NCCL does.
comm::WorkPtr LinkPipelineTransport::send_activation(const void* buf, int64_t n, DType dtype, int /*micro*/,
                                                     const std::string& what) {
  comm::Communicator& c = link_(act_next_, "next-stage activation");
  return c.send_async(buf, n, dtype, 1 - c.rank(), 0, what);
}
comm::WorkPtr LinkPipelineTransport::recv_activation(void* buf, int64_t n, DType dtype, int /*micro*/,
                                                     const std::string& what) {
  comm::Communicator& c = link_(act_prev_, "previous-stage activation");
  return c.recv_async(buf, n, dtype, 1 - c.rank(), 0, what);
}
comm::WorkPtr LinkPipelineTransport::send_gradient(const void* buf, int64_t n, DType dtype, int /*micro*/,
                                                   const std::string& what) {
  comm::Communicator& c = link_(grad_prev_, "previous-stage gradient");
  return c.send_async(buf, n, dtype, 1 - c.rank(), 0, what);
}
comm::WorkPtr LinkPipelineTransport::recv_gradient(void* buf, int64_t n, DType dtype, int /*micro*/,
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
  return fmt::format("one communicator per link and direction ({}; {} buffers, matched by order)",
                     s.empty() ? "none: one stage" : s, device_name(device_));
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

PipelineLinks split_pipeline_links(const comm::MpiCommunicator& pp) {
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
  return out;
}

}  // namespace hpct::parallel
