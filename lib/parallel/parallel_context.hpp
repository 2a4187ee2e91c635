#pragma once
// ParallelContext: built once in main() and passed down (DESIGN.md invariant 2: no hidden global state).
// It owns the world communicator and one sub-communicator per grid axis (parallel/grid.hpp): the TP
// group (adjacent ranks), the DP group (same tp and pp) and the PP group (same tp and dp). Every
// communicator carries comm.timeout_s, so no wait in the job is unbounded (invariant 3).
// The embedding group (DESIGN.md §6, tied embeddings under PP) joins the first and the last pipeline stage
// of the same (tp, dp): they both hold the embedding and sum its gradient over this group. Ranks of the
// middle stages have none (has_embedding_group() false); at PP = 1 it is the rank alone.
#include <memory>
#include <string>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "parallel/grid.hpp"

namespace hpct::parallel {

class ParallelContext {
 public:
  // Collective over MPI_COMM_WORLD. tp, pp and order come from the deck's parallel.* keys; where names
  // the deck for error messages. An impossible layout is a UsageError before any work starts.
  ParallelContext(int tp, int pp, const std::string& order, const comm::CommOptions& opts, const std::string& where);
  ~ParallelContext();
  ParallelContext(const ParallelContext&) = delete;
  ParallelContext& operator=(const ParallelContext&) = delete;

  const Grid& grid() const { return grid_; }
  int rank() const { return rank_; }
  int world_size() const { return grid_.world(); }
  const Coord& coord() const { return coord_; }
  int tp_rank() const { return coord_.tp; }
  int dp_rank() const { return coord_.dp; }
  int pp_rank() const { return coord_.pp; }
  int tp_size() const { return grid_.tp(); }
  int dp_size() const { return grid_.dp(); }
  int pp_size() const { return grid_.pp(); }

  comm::Communicator& world() { return *world_; }
  comm::Communicator& tp_group() { return *tp_; }
  comm::Communicator& dp_group() { return *dp_; }
  comm::Communicator& pp_group() { return *pp_; }
  bool has_embedding_group() const { return emb_ != nullptr; }
  comm::Communicator& embedding_group() {
    HPCT_CHECK(emb_ != nullptr, "pipeline stage {} of {} holds no embedding", coord_.pp, grid_.pp());
    return *emb_;
  }

 private:
  Grid grid_;
  int rank_ = 0;
  Coord coord_;
  std::unique_ptr<comm::Communicator> world_, tp_, dp_, pp_, emb_;
};

}  // namespace hpct::parallel
