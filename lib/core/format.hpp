#pragma once
// Small formatting helpers shared by the libraries' messages and reports.
#include <string>

namespace hpct {

// Bytes in binary units with two decimals: 4194304 -> "4.00 MiB", 512 -> "512.00 B" (B, KiB, ... TiB).
std::string human_bytes(double bytes);

}  // namespace hpct
