#pragma once
// Dense peak TFLOP/s of the accelerators MFU is reported against: the one definition of the peak table
// (docs/performance.md "Peak tables"). The apps print a device's entry in their `--plan ... --json` line
// (`--device-name NAME`), and the validation scripts read it from there instead of carrying a copy.
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace hpct {

struct DevicePeaks {
  std::string_view label;  // e.g. "H100/H200 SXM"
  std::string_view match;  // '|'-separated substrings of the device name (case-insensitive), e.g. "H100|H200"
  double fp32 = 0, tf32 = 0, bf16 = 0, fp16 = 0;  // dense TFLOP/s (tensor cores for tf32 / bf16 / fp16)
  std::string_view source;                        // where the figures come from

  // The figure for a train.precision name (fp32, tf32, bf16, fp16); a UsageError for any other name.
  double tflops(std::string_view precision) const;
};

// The table, most specific entries first (H100 NVL before H100): the first entry that matches a name wins.
std::span<const DevicePeaks> device_peak_table();

// The entry for a device name as the driver reports it (nvidia-smi, cudaDeviceProp::name), e.g.
// "NVIDIA H100 80GB HBM3" -> H100/H200 SXM; nullptr for an unknown or empty name.
const DevicePeaks* find_device_peaks(std::string_view device_name);

// Dense peak TFLOP/s of the device at the precision (fp32, tf32, bf16, fp16); nullopt for an unknown device, a
// UsageError for an unknown precision name.
std::optional<double> peak_tflops(std::string_view device_name, std::string_view precision);

// For the apps' `--plan ... --json` line: s as a JSON string literal (quotes and escapes included), and the
// members (no braces) "device_name":..,"device_peaks":{label, fp32, tf32, bf16, fp16}|null,"peak_tflops":x|null
// for a device name (empty: unknown, all null) at a precision.
std::string json_quote(std::string_view s);
std::string peak_json_members(std::string_view device_name, std::string_view precision);

}  // namespace hpct
