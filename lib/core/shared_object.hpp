#pragma once
// Which shared object a symbol was loaded from, for the run logs' "runtime libraries:" line (lib/train/loop/run_device.hpp):
// the GPU bundle keeps a machine's own copies of the libraries, so the log names the file that actually ran.
#include <string>

namespace hpct {

// "(path)" of the shared object holding `symbol` (dladdr), or "(statically linked)" when none does.
std::string shared_object_of(const void* symbol);

}  // namespace hpct
