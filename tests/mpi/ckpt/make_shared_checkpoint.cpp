// ckpt_make_shared_checkpoint ROOT (under mpirun): writes the test model of tests/unit/ckpt/ckpt_test_model.hpp as
// checkpoint step 7 under ROOT/checkpoints with checkpoint.files = single: every rank's pieces in one shared file
// (write_shared_shard over MPI_COMM_WORLD), index and commit on rank 0; then verifies it. check_index_h5py.py reads it.
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <filesystem>

#include "ckpt/shared_shard.hpp"
#include "ckpt_test_model.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (argc != 2) {
    if (rank == 0) std::fprintf(stderr, "usage: mpirun -np N ckpt_make_shared_checkpoint ROOT\n");
    MPI_Finalize();
    return 2;
  }
  namespace ck = hpct::ckpt;
  int code = 0;
  try {
    const std::string root = std::string(argv[1]) + "/checkpoints";
    if (rank == 0) {
      std::filesystem::remove_all(root);
      std::filesystem::create_directories(root);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const auto model = ck::testing::test_model();
    std::vector<std::vector<unsigned char>> storage;
    const auto pieces = ck::testing::pieces_for_rank(model, rank, world, storage);
    const std::string tmp = root + "/" + ck::tmp_step_dir_name(7);
    const std::string js = ck::write_shared_shard(MPI_COMM_WORLD, tmp, ck::kSingleFileName, rank, pieces).to_json();
    // Manifests to rank 0 (length, then text, one rank at a time: a test, not a hot path).
    if (rank == 0) {
      std::vector<ck::ShardManifest> ms{ck::ShardManifest::from_json(js)};
      for (int r = 1; r < world; ++r) {
        MPI_Status st;
        MPI_Probe(r, 0, MPI_COMM_WORLD, &st);
        int len = 0;
        MPI_Get_count(&st, MPI_CHAR, &len);
        std::string text(static_cast<size_t>(len), '\0');
        MPI_Recv(text.data(), len, MPI_CHAR, r, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        ms.push_back(ck::ShardManifest::from_json(text));
      }
      ck::write_index(tmp, ms, ck::testing::test_attrs(7));
      const std::string dir = ck::commit(root, 7, 1);
      const int64_t bytes = ck::verify(dir);
      std::printf("ckpt_make_shared_checkpoint: wrote %s (%d ranks into %s, %lld bytes verified)\n", dir.c_str(), world,
                  ck::kSingleFileName, static_cast<long long>(bytes));
    } else {
      MPI_Send(js.data(), static_cast<int>(js.size()), MPI_CHAR, 0, 0, MPI_COMM_WORLD);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ckpt_make_shared_checkpoint: rank %d: error: %s\n", rank, e.what());
    code = 1;
  }
  if (code != 0 && world > 1) MPI_Abort(MPI_COMM_WORLD, code);
  MPI_Finalize();
  return code;
}
