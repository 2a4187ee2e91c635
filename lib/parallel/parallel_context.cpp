#include "parallel/parallel_context.hpp"

#include <mpi.h>

#include "comm/mpi_communicator.hpp"
#include "core/mpi_check.hpp"
#if HPCT_HAVE_NCCL
#include "comm/nccl_communicator.hpp"
#endif

namespace hpct::parallel {

namespace {
int mpi_world_size() {
  int n = 1;
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &n));
  return n;
}

// The device twin of an MPI group: on CUDA an NcclCommunicator over the same ranks (collective over `host`), whose
// operations wait for the compute stream; null on the CPU (the MPI group serves both).
std::unique_ptr<comm::Communicator> device_twin(comm::MpiCommunicator& host, const ExecContext& exec,
                                                const comm::CommOptions& opts) {
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
}  // namespace

ParallelContext::ParallelContext(int tp, int pp, const std::string& order, const comm::CommOptions& opts,
                                 const std::string& where, const ExecContext& exec)
    : grid_(mpi_world_size(), tp, pp, order, where), device_(exec.device) {
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
  std::unique_ptr<comm::MpiCommunicator> embg =
      world->split(holds_embedding ? grid_.group_id(Axis::PP, rank_) : MPI_UNDEFINED, coord_.pp, "embedding");
  HPCT_CHECK((embg != nullptr) == holds_embedding, "embedding group of stage {}", coord_.pp);
  // Device groups (CUDA: NCCL), built in the same order on every rank (each init is collective over its group);
  // also at size 1, where the model still calls them (SyncBN's allgather at DP 1).
  dev_tp_ = device_twin(*tpg, exec, opts);
  dev_dp_ = device_twin(*dpg, exec, opts);
  if (embg) dev_emb_ = device_twin(*embg, exec, opts);
  tp_ = std::move(tpg);
  dp_ = std::move(dpg);
  pp_ = std::move(ppg);
  emb_ = std::move(embg);
  world_ = std::move(world);
}

ParallelContext::~ParallelContext() = default;

std::string ParallelContext::describe_device_groups() const {
  if (!dev_tp_) return "MPI for every group (host buffers)";
  return "NCCL for tp, dp and the embedding group (device buffers, stream-ordered after the compute stream); MPI for "
         "the world, pp (host-staged activations) and host scalars";
}

}  // namespace hpct::parallel
