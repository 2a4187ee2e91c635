#include "parallel/parallel_context.hpp"

#include <mpi.h>

#include "comm/mpi_communicator.hpp"
#include "core/mpi_check.hpp"

namespace hpct::parallel {

namespace {
int mpi_world_size() {
  int n = 1;
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &n));
  return n;
}
}  // namespace

ParallelContext::ParallelContext(int tp, int pp, const std::string& order, const comm::CommOptions& opts,
                                 const std::string& where)
    : grid_(mpi_world_size(), tp, pp, order, where) {
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  coord_ = grid_.coord_of(rank_);
  auto world = std::make_unique<comm::MpiCommunicator>(MPI_COMM_WORLD, "world", opts);
  // key = the coordinate on the axis, so a group's rank i is the member with coordinate i
  tp_ = world->split(grid_.group_id(Axis::TP, rank_), coord_.tp, "tp");
  dp_ = world->split(grid_.group_id(Axis::DP, rank_), coord_.dp, "dp");
  pp_ = world->split(grid_.group_id(Axis::PP, rank_), coord_.pp, "pp");
  HPCT_CHECK(tp_->size() == grid_.tp() && dp_->size() == grid_.dp() && pp_->size() == grid_.pp(),
             "group sizes tp {} dp {} pp {} do not match the grid {}", tp_->size(), dp_->size(), pp_->size(),
             grid_.describe());
  HPCT_CHECK(tp_->rank() == coord_.tp && dp_->rank() == coord_.dp && pp_->rank() == coord_.pp,
             "group ranks do not match the grid coordinates");
  const bool holds_embedding = coord_.pp == 0 || coord_.pp == grid_.pp() - 1;
  emb_ = world->split(holds_embedding ? grid_.group_id(Axis::PP, rank_) : MPI_UNDEFINED, coord_.pp, "embedding");
  HPCT_CHECK((emb_ != nullptr) == holds_embedding, "embedding group of stage {}", coord_.pp);
  world_ = std::move(world);
}

ParallelContext::~ParallelContext() = default;

}  // namespace hpct::parallel
