// train.device (docs/contracts.md) as decide_device takes it: cpu | cuda | auto against what the build and the ranks
// have. The collective part (RunDevice: every rank's CUDA availability gathered) runs in the integration tests
// (check_device_fallback.py); the GPU parts in test_cuda_device (label cuda).
#include <gtest/gtest.h>

#include <string>

#include "train/loop/run_device.hpp"

namespace hpct::train {
namespace {

const std::string kDeck = "inputs/gpt_tiny.toml";
const std::string kDriver =
    "CUDA driver version is insufficient for CUDA runtime version (cudaErrorInsufficientDriver)";
const std::string kNoBackend = "this build has no CUDA backend (configured without the CUDA toolkit, or with "
                               "-DHPCT_ENABLE_CUDA=OFF)";

std::string usage_message(const std::string& requested, const std::string& gap, int unusable, int world,
                          const std::string& reason) {
  try {
    decide_device(requested, gap, unusable, world, reason, kDeck);
  } catch (const UsageError& e) {
    return e.cause();
  }
  return "";
}

TEST(DecideDevice, CpuIsCpuWhateverTheMachineHas) {
  for (int unusable : {0, 1}) {
    const DeviceDecision d = decide_device("cpu", "", unusable, 1, unusable ? kDriver : "", kDeck);
    EXPECT_EQ(d.device, Device::CPU);
    EXPECT_EQ(d.note, "");
  }
  const DeviceDecision d = decide_device("cpu", kNoBackend, 0, 4, "", kDeck);
  EXPECT_EQ(d.device, Device::CPU);
  EXPECT_EQ(d.note, "");
}

TEST(DecideDevice, CudaAndAutoPickCudaWhenEveryRankHasOne) {
  for (const char* req : {"cuda", "auto"}) {
    const DeviceDecision d = decide_device(req, "", 0, 8, "", kDeck);
    EXPECT_EQ(d.device, Device::CUDA) << req;
    EXPECT_EQ(d.note, "") << req;
  }
}

TEST(DecideDevice, AutoFallsBackWithOneLineNamingTheCause) {
  const DeviceDecision d = decide_device("auto", "", 1, 1, kDriver, kDeck);
  EXPECT_EQ(d.device, Device::CPU);
  EXPECT_EQ(d.note, "train.device = auto: no usable CUDA device (" + kDriver + "): running on the CPU");
  EXPECT_EQ(d.note.find('\n'), std::string::npos);
  const DeviceDecision b = decide_device("auto", kNoBackend, 0, 2, "", kDeck);
  EXPECT_EQ(b.device, Device::CPU);
  EXPECT_EQ(b.note, "train.device = auto: " + kNoBackend + ": running on the CPU");
}

TEST(DecideDevice, OneRankWithoutGpuMovesTheWholeJob) {
  // a node without GPUs cannot split the job: auto runs every rank on the CPU, and says how many ranks lacked one
  const std::string why = "rank 3 on vm02: " + kDriver;
  const DeviceDecision d = decide_device("auto", "", 1, 4, why, kDeck);
  EXPECT_EQ(d.device, Device::CPU);
  EXPECT_NE(d.note.find("no usable CUDA device on 1 of 4 ranks (rank 3 on vm02: CUDA driver"), std::string::npos)
      << d.note;
  const std::string msg = usage_message("cuda", "", 1, 4, why);
  EXPECT_NE(msg.find("on 1 of 4 ranks (rank 3 on vm02"), std::string::npos) << msg;
}

TEST(DecideDevice, CudaWithoutDeviceIsAUsageErrorNamingCauseAndFix) {
  const std::string msg = usage_message("cuda", "", 1, 1, kDriver);
  EXPECT_NE(msg.find("deck inputs/gpt_tiny.toml: train.device = \"cuda\" but no usable CUDA device (" + kDriver + ")"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("--set train.device=cpu"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(DecideDevice, CudaWithoutBackendIsAUsageErrorNamingTheBuild) {
  const std::string msg = usage_message("cuda", kNoBackend, 0, 1, "");
  EXPECT_NE(msg.find("train.device = \"cuda\" but this build has no CUDA backend"), std::string::npos) << msg;
  EXPECT_NE(msg.find("-DHPCT_ENABLE_CUDA=ON"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--set train.device=cpu"), std::string::npos) << msg;
  // the build gap wins over device counts (there is nothing to count without the backend)
  EXPECT_NE(usage_message("cuda", kNoBackend, 1, 1, kDriver).find("no CUDA backend"), std::string::npos);
}

// train.precision on the decided device: CUDA keeps it; the CPU computes fp32 or bf16 and refuses the CUDA-only
// precisions (tf32: tensor-core arithmetic on fp32 storage; fp16: fp16 storage).
TEST(DecidePrecision, CudaKeepsTheRequestedPrecision) {
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::BF16, Precision::FP16}) {
    std::string note;
    EXPECT_EQ(decide_precision("cuda", Device::CUDA, p, kDeck, &note), p);
    EXPECT_EQ(decide_precision("auto", Device::CUDA, p, kDeck, &note), p);
    EXPECT_EQ(note, "");
  }
}

TEST(DecidePrecision, CpuRunsFp32AndBf16AndRefusesTf32AndFp16) {
  std::string note;
  EXPECT_EQ(decide_precision("cpu", Device::CPU, Precision::FP32, kDeck, &note), Precision::FP32);
  EXPECT_EQ(decide_precision("cpu", Device::CPU, Precision::BF16, kDeck, &note), Precision::BF16);
  EXPECT_EQ(decide_precision("auto", Device::CPU, Precision::BF16, kDeck, &note), Precision::BF16);
  for (Precision p : {Precision::TF32, Precision::FP16}) {
    try {
      decide_precision("cpu", Device::CPU, p, kDeck, &note);
      ADD_FAILURE() << "no error for " << precision_name(p);
    } catch (const UsageError& e) {
      const std::string c = e.cause();
      EXPECT_NE(c.find(std::string("train.precision = ") + precision_name(p)), std::string::npos) << c;
      EXPECT_NE(c.find("--set train.precision=fp32 or bf16"), std::string::npos) << c;
      if (p == Precision::FP16)
        EXPECT_NE(c.find("fp16 storage with dynamic loss scaling exists on CUDA only"), std::string::npos) << c;
      EXPECT_NE(c.find(kDeck), std::string::npos) << c;
    }
  }
  EXPECT_EQ(note, "");
}

TEST(DecidePrecision, AutoFallingBackToTheCpuRunsFp32ForCudaOnlyPrecisionsWithANote) {
  std::string note = "train.device = auto: no usable CUDA device (x): running on the CPU";
  EXPECT_EQ(decide_precision("auto", Device::CPU, Precision::TF32, kDeck, &note), Precision::FP32);
  EXPECT_EQ(note, "train.device = auto: no usable CUDA device (x): running on the CPU; train.precision = tf32 applies "
                  "to CUDA only: fp32 on the CPU");
  std::string unchanged = "n";
  EXPECT_EQ(decide_precision("auto", Device::CPU, Precision::FP32, kDeck, &unchanged), Precision::FP32);
  EXPECT_EQ(decide_precision("auto", Device::CPU, Precision::BF16, kDeck, &unchanged), Precision::BF16);
  EXPECT_EQ(unchanged, "n");
}

TEST(ActivationDtype, Bf16AndFp16StoreTheirTypeAndFp32AndTf32StoreFp32) {
  EXPECT_EQ(activation_dtype(Precision::BF16), DType::BF16);
  EXPECT_EQ(activation_dtype(Precision::FP16), DType::F16);
  for (Precision p : {Precision::FP32, Precision::TF32}) EXPECT_EQ(activation_dtype(p), DType::F32);
}

TEST(ParsePrecision, NamesRoundTripAndUnknownIsAUsageError) {
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::BF16, Precision::FP16})
    EXPECT_EQ(parse_precision(precision_name(p)), p);
  try {
    parse_precision("fp8");
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.cause()).find("fp32, tf32, bf16, fp16"), std::string::npos) << e.cause();
  }
}

// Several ranks on one GPU: refused with NCCL unless NCCL >= 2.30 runs with NCCL_MULTI_RANK_GPU_ENABLE=1; allowed by
// host staging whatever the NCCL; one rank per device needs no note.
TEST(RanksPerGpu, OneRankPerDeviceIsAlwaysFine) {
  std::string note = "stale";
  for (comm::DeviceBackend b : {comm::DeviceBackend::Nccl, comm::DeviceBackend::HostStagedMpi}) {
    EXPECT_EQ(ranks_per_gpu_problem(4, 4, "gpu01", b, false, 22809, &note), "");
    EXPECT_EQ(note, "");
    EXPECT_EQ(ranks_per_gpu_problem(1, 8, "gpu01", b, false, 0, &note), "");
  }
}

TEST(RanksPerGpu, NcclRefusesSharingAndNamesTheWaysOut) {
  std::string note;
  const std::string p = ranks_per_gpu_problem(4, 1, "gpu01", comm::DeviceBackend::Nccl, false, 23007, &note);
  EXPECT_NE(p.find("4 ranks run on gpu01 but it has 1 visible CUDA device(s)"), std::string::npos) << p;
  EXPECT_NE(p.find("comm.backend=mpi"), std::string::npos) << p;
  EXPECT_NE(p.find("NCCL_MULTI_RANK_GPU_ENABLE=1"), std::string::npos) << p;
  EXPECT_NE(p.find("train.device=cpu"), std::string::npos) << p;
  EXPECT_EQ(note, "");
}

TEST(RanksPerGpu, TheMultiRankFlagNeedsNccl230) {
  std::string note;
  const std::string old = ranks_per_gpu_problem(2, 1, "gpu01", comm::DeviceBackend::Nccl, true, 22809, &note);
  EXPECT_NE(old.find("needs NCCL 2.30 or later, but this process loaded NCCL 2.28.9"), std::string::npos) << old;
  EXPECT_EQ(ranks_per_gpu_problem(2, 1, "gpu01", comm::DeviceBackend::Nccl, true, 23007, &note), "");
  EXPECT_NE(note.find("up to 2 ranks share each device (NCCL 2.30.7 with NCCL_MULTI_RANK_GPU_ENABLE=1)"),
            std::string::npos)
      << note;
}

TEST(RanksPerGpu, HostStagingSharesWhateverTheNccl) {
  std::string note;
  EXPECT_EQ(ranks_per_gpu_problem(8, 1, "gpu01", comm::DeviceBackend::HostStagedMpi, false, 22809, &note), "");
  EXPECT_NE(note.find("8 ranks run on gpu01 but it has 1 visible CUDA device(s): up to 8 ranks share each device "
                      "(comm.backend = mpi"),
            std::string::npos)
      << note;
  EXPECT_EQ(ranks_per_gpu_problem(3, 2, "gpu01", comm::DeviceBackend::HostStagedMpi, false, 0, &note), "");
  EXPECT_NE(note.find("up to 2 ranks share each device"), std::string::npos) << note;
}

TEST(RuntimeLibraries, NamesMpiWithItsPath) {
  const std::string line = runtime_libraries_line();
  EXPECT_EQ(line.rfind("runtime libraries: ", 0), 0u) << line;
  EXPECT_NE(line.find("mpi "), std::string::npos) << line;
  EXPECT_NE(line.find("libmpi"), std::string::npos) << line;  // dladdr found the shared object
#if HPCT_HAVE_NCCL
  EXPECT_NE(line.find("nccl 2."), std::string::npos) << line;
#endif
}

}  // namespace
}  // namespace hpct::train
