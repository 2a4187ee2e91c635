#include "parallel/parallel_context.hpp"

#include "parallel/grad_sync.hpp"

#include <mpi.h>

#include "comm/mpi_communicator.hpp"
#include "core/mpi_check.hpp"
#include "parallel/staged_communicator.hpp"
#if HPCT_HAVE_NCCL
#include "comm/nccl_communicator.hpp"
#include "comm/nccl_sync_guard.hpp"
#endif

namespace hpct::parallel {

namespace {
int mpi_world_size() {
  int n = 1;
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &n));
  return n;
}

// The device twin of an MPI group: on CUDA an NcclCommunicator over the same ranks (collective over `host`), whose
// operations wait for the compute stream, or with comm.backend = mpi a HostStagedCommunicator over it; null on the
// CPU (the MPI group serves both) unless the staging is emulated there.
std::unique_ptr<comm::Communicator> device_twin(comm::MpiCommunicator& host, const ExecContext& exec,
                                                const comm::CommOptions& opts) {
  if (uses_host_staging(exec.device, opts.device_backend))
    return std::make_unique<HostStagedCommunicator>(host, exec, host.name(), collective_staging());
  if (exec.device == Device::CPU) return nullptr;
#if HPCT_HAVE_NCCL
  auto nccl = std::make_unique<comm::NcclCommunicator>(host, host.name(), opts);
  // Operations start after the kernels queued so far on the compute stream (the buffers they read are written there).
  nccl->set_input_stream(static_cast<cudaStream_t>(exec.stream));
  return nccl;
#else
  (void)host;
  (void)opts;
  HPCT_FAIL("ParallelContext on {}: this build has no NCCL (NcclCommunicator not built), which device buffers need",
            device_name(exec.device));
#endif
}

#if HPCT_HAVE_NCCL
// An NCCL communicator over a 2-rank MPI link, for one direction of it, its point-to-point connections set up now.
std::unique_ptr<comm::Communicator> nccl_link(comm::MpiCommunicator& link, const char* direction,
                                              const ExecContext& exec, const comm::CommOptions& opts) {
  auto nccl = std::make_unique<comm::NcclCommunicator>(link, fmt::format("{} {}", link.name(), direction), opts);
  nccl->set_input_stream(static_cast<cudaStream_t>(exec.stream));
  nccl->connect_p2p(1 - nccl->rank(), "connection set-up");
  return nccl;
}
#endif
}  // namespace

ParallelContext::ParallelContext(int tp, int pp, const std::string& order, const comm::CommOptions& opts,
                                 const std::string& where, const ExecContext& exec, int zero_group, int virtual_stages)
    : grid_(mpi_world_size(), tp, pp, order, where), device_(exec.device), exec_(exec) {
  virtual_stages_ = virtual_stages;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  coord_ = grid_.coord_of(rank_);
  auto world = std::make_unique<comm::MpiCommunicator>(MPI_COMM_WORLD, "world", opts);
  // key = the coordinate on the axis, so a group's rank i is the member with coordinate i
  std::unique_ptr<comm::MpiCommunicator> tpg = world->split(grid_.group_id(Axis::TP, rank_), coord_.tp, "tp");
  std::unique_ptr<comm::MpiCommunicator> dpg = world->split(grid_.group_id(Axis::DP, rank_), coord_.dp, "dp");
  std::unique_ptr<comm::MpiCommunicator> ppg = world->split(grid_.group_id(Axis::PP, rank_), coord_.pp, "pp");
  HPCT_CHECK(tpg->size() == grid_.tp() && dpg->size() == grid_.dp() && ppg->size() == grid_.pp(),
             "group sizes tp {} dp {} pp {} do not match the grid {}", tpg->size(), dpg->size(), ppg->size(),
             grid_.describe());
  HPCT_CHECK(tpg->rank() == coord_.tp && dpg->rank() == coord_.dp && ppg->rank() == coord_.pp,
             "group ranks do not match the grid coordinates");
  const bool holds_embedding = coord_.pp == 0 || coord_.pp == grid_.pp() - 1;
  std::unique_ptr<comm::MpiCommunicator> embg = world->split(
      holds_embedding ? grid_.group_id(Axis::PP, rank_) : MPI_UNDEFINED, coord_.pp, "embedding");
  HPCT_CHECK((embg != nullptr) == holds_embedding, "embedding group of stage {}", coord_.pp);
  // Device groups (CUDA: NCCL), built in the same order on every rank (each init is collective over its group);
  // also at size 1, where the model still calls them (SyncBN's allgather at DP 1).
  dev_tp_ = device_twin(*tpg, exec, opts);
  dev_dp_ = device_twin(*dpg, exec, opts);
  if (embg) dev_emb_ = device_twin(*embg, exec, opts);
  // hybrid sharding: the DP axis as a mesh of zero_group consecutive DP ranks (a shard group) x the replicas across them
  if (parallel::zero_shard_size(zero_group, grid_.dp(), where) != grid_.dp()) {
    const Mesh dp_mesh({{"zero_shard", zero_group}, {"zero_replica", grid_.dp() / zero_group}});
    const int d = coord_.dp;
    std::unique_ptr<comm::MpiCommunicator> sg = dpg->split(dp_mesh.group_id("zero_shard", d),
                                                           dp_mesh.coord(d, "zero_shard"), "zero_shard");
    std::unique_ptr<comm::MpiCommunicator> rg = dpg->split(dp_mesh.group_id("zero_replica", d),
                                                           dp_mesh.coord(d, "zero_replica"), "zero_replica");
    dev_shard_ = device_twin(*sg, exec, opts);
    dev_replica_ = device_twin(*rg, exec, opts);
    shard_ = std::move(sg);
    replica_ = std::move(rg);
  }
  HPCT_USAGE_CHECK(virtual_stages >= 1 && (virtual_stages == 1 || grid_.pp() > 1),
                   "{}: parallel.virtual_stages = {} with pp = {}: virtual stages interleave a pipeline of several "
                   "ranks; set parallel.virtual_stages = 1 or pp > 1",
                   where, virtual_stages, grid_.pp());
  staged_ = uses_host_staging(exec.device, opts.device_backend);
  // Pipeline links (NCCL, pp > 1): even links first, then odd links, then the wrap, on every rank (see the header).
  // Host-staged device groups send the activations over the staged pp group, tagged as on the CPU.
  if (staged_ && grid_.pp() > 1) {
    dev_pp_ = std::make_unique<HostStagedCommunicator>(*ppg, exec, ppg->name(),
                                                       StagingPlan{});  // reserve_pipeline_staging
    pipe_ = std::make_unique<MpiPipelineTransport>(*dev_pp_, virtual_stages);
  } else if (exec.device != Device::CPU && grid_.pp() > 1) {
    PipelineLinks links = split_pipeline_links(*ppg, virtual_stages > 1);
#if HPCT_HAVE_NCCL
    auto build = [&](bool even) {
      if (links.prev && links.prev_in_even == even) {  // this stage is rank 1: receives activations, sends gradients
        act_prev_ = nccl_link(*links.prev, "activations", exec, opts);
        grad_prev_ = nccl_link(*links.prev, "gradients", exec, opts);
      }
      if (links.next && links.next_in_even == even) {  // this stage is rank 0: sends activations, receives gradients
        act_next_ = nccl_link(*links.next, "activations", exec, opts);
        grad_next_ = nccl_link(*links.next, "gradients", exec, opts);
      }
    };
    build(true);
    build(false);
    if (links.wrap) {  // the first stage is its rank 1 (its prev), the last its rank 0 (its next)
      auto& act = ppg->rank() == 0 ? act_prev_ : act_next_;
      auto& grad = ppg->rank() == 0 ? grad_prev_ : grad_next_;
      act = nccl_link(*links.wrap, "activations", exec, opts);
      grad = nccl_link(*links.wrap, "gradients", exec, opts);
    }
#endif
    link_prev_ = std::move(links.prev);
    link_next_ = std::move(links.next);
    link_wrap_ = std::move(links.wrap);
    pipe_ = std::make_unique<LinkPipelineTransport>(*ppg, act_prev_.get(), grad_prev_.get(), act_next_.get(),
                                                    grad_next_.get(), virtual_stages);
  } else {
    pipe_ = std::make_unique<MpiPipelineTransport>(*ppg, virtual_stages);
  }
#if HPCT_HAVE_NCCL
  // every NCCL communicator of this context, watched by the compute stream's waits (host staging has none)
  if (exec.device != Device::CPU && !staged_) {
    auto guard = std::make_unique<comm::NcclSyncGuard>(rank_, opts.timeout_s);
    for (comm::Communicator* c : {dev_tp_.get(), dev_dp_.get(), dev_emb_.get(), dev_shard_.get(), dev_replica_.get(),
                                  act_prev_.get(), grad_prev_.get(), act_next_.get(), grad_next_.get()})
      if (c != nullptr) guard->watch(static_cast<comm::NcclCommunicator&>(*c));
    exec_.sync_guard = guard.get();
    guard_ = std::move(guard);
  }
#endif
  tp_ = std::move(tpg);
  dp_ = std::move(dpg);
  pp_ = std::move(ppg);
  emb_ = std::move(embg);
  world_ = std::move(world);
}

ParallelContext::~ParallelContext() = default;

std::vector<comm::Communicator*> ParallelContext::communicators() const {
  std::vector<comm::Communicator*> all;
  for (comm::Communicator* c :
       {world_.get(),     tp_.get(),          dp_.get(),        pp_.get(),        emb_.get(),
        shard_.get(),     replica_.get(),     dev_tp_.get(),    dev_dp_.get(),    dev_emb_.get(),
        dev_shard_.get(), dev_replica_.get(), dev_pp_.get(),    link_prev_.get(), link_next_.get(),
        link_wrap_.get(), act_prev_.get(),    grad_prev_.get(), act_next_.get(),  grad_next_.get()})
    if (c != nullptr) all.push_back(c);
  return all;
}

comm::CommVolume ParallelContext::comm_volume() const {
  comm::CommVolume v;
  for (const comm::Communicator* c : communicators()) v += c->volume();
  return v;
}

void ParallelContext::reset_comm_volume() {
  for (comm::Communicator* c : communicators()) c->reset_volume();
}

void ParallelContext::reserve_pipeline_staging(int transfers, size_t bytes) {
  if (auto* s = dynamic_cast<HostStagedCommunicator*>(dev_pp_.get())) s->reserve_p2p(transfers, bytes);
}

size_t ParallelContext::staging_bytes() const {
  size_t n = 0;
  for (const comm::Communicator* c :
       {dev_tp_.get(), dev_dp_.get(), dev_emb_.get(), dev_shard_.get(), dev_replica_.get(), dev_pp_.get()})
    if (const auto* s = dynamic_cast<const HostStagedCommunicator*>(c)) n += s->staging_bytes();
  return n;
}

std::string ParallelContext::describe_device_groups() const {
  if (!dev_tp_) return "MPI for every group (host buffers)";
  if (staged_)
    return fmt::format("MPI over pinned host staging for tp, dp, the embedding group{} (device buffers copied to the "
                       "host after the compute stream, reduced by MPI, copied back in stream order: comm.backend = "
                       "mpi{}); MPI for the world and host scalars",
                       grid_.pp() > 1 ? " and the pipeline (pp group, tagged)" : "",
                       device_ == Device::CPU ? ", emulated on the CPU by HPCT_STAGE_DEVICE_GROUPS=1" : "");
  return fmt::format("NCCL for tp, dp and the embedding group (device buffers, stream-ordered on the compute stream, "
                     "host waits bounded by the sync guard); pipeline: {}; MPI for the world, the pp group's barriers "
                     "and host scalars",
                     grid_.pp() > 1 ? pipe_->describe() : std::string("none (pp = 1: no links)"));
}

}  // namespace hpct::parallel
