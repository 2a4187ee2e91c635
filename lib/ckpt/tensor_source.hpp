#pragma once
// A source of whole logical tensors, read by hyperslab: what a checkpoint's index is (ckpt::Reader) and what an
// imported model directory is (lib/interop: a Hugging Face GPT-2), so that one loader places either onto any layout
// (lib/train/checkpoint/protocol.hpp, load_parameters: each TP / PP / ZeRO shard reads only its box).
#include <cstdint>
#include <string>
#include <vector>

namespace hpct::ckpt {

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // For messages and the log: "Hugging Face GPT-2 /path/to/gpt2".
  virtual std::string describe() const = 0;
  // Logical names as the model names its parameters ("wte", "h.0.attn.qkv.weight"), without the "model/" group.
  virtual bool has(const std::string& name) const = 0;
  virtual std::vector<int64_t> shape(const std::string& name) const = 0;
  // The hyperslab [offset, offset + count) of tensor `name`, row-major fp32, into out (numel(count) floats).
  virtual void read(const std::string& name, const std::vector<int64_t>& offset, const std::vector<int64_t>& count,
                    float* out) const = 0;
};

}  // namespace hpct::ckpt
