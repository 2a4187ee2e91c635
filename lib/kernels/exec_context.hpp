#pragma once
// Execution context every kernel takes (DESIGN.md §7): which backend runs it and on which stream.
// On the CPU the stream is unused (kernels complete before they return); on CUDA it is a cudaStream_t.
#include "tensor/device.hpp"

namespace hpct {

struct ExecContext {
  Device device = Device::CPU;
  void* stream = nullptr;  // cudaStream_t on Device::CUDA, unused on Device::CPU
};

}  // namespace hpct
