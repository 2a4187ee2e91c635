#pragma once
// Where memory lives. Tensors know their device; host<->device copies are explicit (kernels/ copy_*).
#include <cstddef>

namespace hpct {

enum class Device { CPU, CUDA };

inline const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

// Raw allocation on a device, 64-byte aligned on the CPU. Throws hpct::Error naming the size on failure.
void* device_alloc(Device d, size_t bytes);
void device_free(Device d, void* p);

}  // namespace hpct
