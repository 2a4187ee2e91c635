#pragma once
// Hugging Face GPT-2 <-> hpctrain's GPT: names, layouts and config.json, both ways (docs/contracts.md, "ckpt_tool" and
// `model.init_from`). The files are those of transformers' GPT2LMHeadModel: config.json + model.safetensors (or a
// sharded model.safetensors.index.json with its weight_map).
//
// Legend: L layers, C n_embd, NH heads, HS = C/NH, V vocab_size, Vp padded vocab (multiple of 128), T seq_len,
// P n_positions (>= T). HF's Conv1D stores a Linear's weight transposed, (in, out).
//
//   hpctrain (logical)              Hugging Face (transformer.<...>)     mapping
//   wte (Vp, C)                     wte.weight (V, C)                    rows [0, V); rows [V, Vp) zero
//   wpe (T, C)                      wpe.weight (P, C)                    rows [0, T) (export: P = T)
//   h.l.ln1.{weight,bias} (C)       h.l.ln_1.{weight,bias}               same
//   h.l.attn.qkv.weight (3,NH,HS,C) h.l.attn.c_attn.weight (C, 3C)       transpose of the (3C, C) view: HF's output
//                                                                        column s C + h HS + d is (s, h, d)
//   h.l.attn.qkv.bias (3, NH, HS)   h.l.attn.c_attn.bias (3C)            same elements
//   h.l.attn.proj.weight (C, C)     h.l.attn.c_proj.weight (C, C)        transpose
//   h.l.ln2.*, h.l.mlp.fc.*         h.l.ln_2.*, h.l.mlp.c_fc.* (C, 4C)   same / transpose
//   h.l.mlp.proj.weight (C, 4C)     h.l.mlp.c_proj.weight (4C, C)        transpose
//   lnf.{weight,bias} (C)           ln_f.{weight,bias}                   same
//   (tied head)                     lm_head.weight (V, C), if present    must equal wte.weight
// A model without biases (model.bias = false) exports zero biases (GPT-2 has no bias-free variant) and imports only
// all-zero biases. The semantics match: GELU tanh approximation ("gelu_new"), LayerNorm eps 1e-5, attention scaled by
// 1/sqrt(HS), pre-LayerNorm blocks, tied embeddings (lib/kernels/reference/reference.cpp).
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/checkpoint.hpp"
#include "ckpt/safetensors.hpp"
#include "ckpt/tensor_source.hpp"
#include "models/gpt/gpt.hpp"

namespace hpct::interop {

// The GPT of an hpctrain checkpoint, from its tensors' shapes (wte (Vp, C), wpe (T, C), h.<l>.attn.qkv.weight
// (3, NH, HS, C), bias presence) and attributes (model.vocab_size). `what` prefixes the messages. A checkpoint of
// another model is a UsageError: "... is not a GPT checkpoint ...", naming the app that wrote it.
gpt::GptConfig gpt_config_of_checkpoint(const ckpt::Reader& reader, const std::string& what);

// The HF tensor name (without the "transformer." prefix) of an hpctrain parameter, and whether its layout is the
// transpose of hpctrain's (matrix) view.
struct HfName {
  std::string name;
  bool transposed = false;
};
HfName hf_gpt2_name(const std::string& hpct_name);

struct HfExportResult {
  int64_t tensors = 0, parameters = 0, bytes = 0;
};
// Writes outdir/config.json and outdir/model.safetensors (dtype F32 or BF16) of the checkpoint's GPT, loadable by
// transformers.GPT2LMHeadModel.from_pretrained(outdir). outdir is created; both files are written atomically.
HfExportResult export_hf_gpt2(const ckpt::Reader& reader, const std::string& outdir, DType dtype);

// A Hugging Face GPT-2 directory as logical tensors of hpctrain's layout for the deck's model: the source
// model.init_from loads (train/checkpoint/protocol.hpp, load_parameters). The constructor checks everything first, each
// problem a UsageError that names the directory, the key or tensor, both values and what to set: the directory and
// its files, config.json against the deck (n_layer, n_head, n_embd, vocab_size; n_positions >= seq_len; GELU tanh;
// layer_norm_epsilon 1e-5), every tensor's presence and shape, lm_head.weight == wte.weight, and under model.bias =
// false that every bias is zero. read() builds one whole tensor at a time (cached) and copies the asked box.
class HfGpt2Source final : public ckpt::TensorSource {
 public:
  HfGpt2Source(const std::string& dir, const gpt::GptConfig& deck);
  ~HfGpt2Source() override;

  std::string describe() const override;
  bool has(const std::string& name) const override;
  std::vector<int64_t> shape(const std::string& name) const override;
  void read(const std::string& name, const std::vector<int64_t>& offset, const std::vector<int64_t>& count,
            float* out) const override;

  const std::string& dir() const { return dir_; }
  int64_t num_tensors() const { return static_cast<int64_t>(shapes_.size()); }
  int64_t num_parameters() const;  // of the deck's model, padding rows excluded
  int n_positions() const { return n_positions_; }
  const std::vector<std::string>& files() const { return file_names_; }

 private:
  struct Located {
    const ckpt::SafetensorsFile* file = nullptr;
    std::string name;  // as stored (with or without "transformer.")
  };
  const Located& hf(const std::string& hf_name) const;  // UsageError when absent
  std::vector<float> hf_f32(const std::string& hf_name) const;
  void build(const std::string& name) const;  // whole logical tensor -> cache_

  std::string dir_;
  gpt::GptConfig cfg_;
  int n_positions_ = 0;
  std::vector<std::unique_ptr<ckpt::SafetensorsFile>> files_;
  std::vector<std::string> file_names_;
  std::map<std::string, Located> tensors_;              // HF name without the prefix -> where
  std::map<std::string, std::vector<int64_t>> shapes_;  // hpctrain name -> logical shape (the deck's model)
  mutable std::string cache_name_;
  mutable std::vector<float> cache_;
};

}  // namespace hpct::interop
