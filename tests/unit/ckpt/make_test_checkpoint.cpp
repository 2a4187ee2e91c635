// ckpt_make_test_checkpoint ROOT: writes the test model (ckpt_test_model.hpp) as checkpoint step 7 under
// ROOT/checkpoints (3 simulated ranks, committed), for the h5py and h5dump checks registered with ctest.
#include <cstdio>
#include <exception>
#include <filesystem>

#include "ckpt_test_model.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: ckpt_make_test_checkpoint ROOT\n");
    return 2;
  }
  try {
    const std::string root = std::string(argv[1]) + "/checkpoints";
    std::filesystem::remove_all(root);
    std::filesystem::create_directories(root);
    const std::string dir = hpct::ckpt::testing::write_test_checkpoint(root, 7, 1);
    const int64_t bytes = hpct::ckpt::verify(dir);
    std::printf("ckpt_make_test_checkpoint: wrote %s (%lld bytes verified)\n", dir.c_str(),
                static_cast<long long>(bytes));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ckpt_make_test_checkpoint: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
