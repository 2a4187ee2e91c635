#include "models/gpt/gpt_sample.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "core/rng.hpp"
#include "kernels/kernels.hpp"

namespace hpct::gpt {

namespace k = hpct::kernels;

std::string generate(const ExecContext& ctx, Gpt& model, const SampleOptions& smp, Tensor& in_dev, uint64_t seed) {
  const auto& c = model.config();
  const int T = c.seq_len, V = c.vocab_size, Vp = c.padded_vocab;
  const int n_new = smp.tokens, top_k = smp.top_k;
  const double temperature = smp.temperature;
  std::vector<int32_t> tokens;
  for (unsigned char ch : smp.prompt) tokens.push_back(std::min<int32_t>(ch, V - 1));
  if (tokens.empty()) tokens.push_back(0);
  const size_t prompt_len = tokens.size();
  std::vector<int32_t> window(static_cast<size_t>(T), 0);
  std::vector<float> row(static_cast<size_t>(Vp));
  // the last row of the logits as stored (bf16 / f16: 2 bytes an element), widened into `row` on the host
  const DType act = model.activation_dtype();
  std::vector<unsigned char> row_stored(static_cast<size_t>(Vp) * dtype_size(act));
  model.refresh_compute_params(ctx);  // sampling follows the last optimizer step (a no-op in fp32)
  std::vector<std::pair<float, int>> cand(static_cast<size_t>(V));
  for (int i = 0; i < n_new; ++i) {
    const size_t start = tokens.size() > static_cast<size_t>(T) ? tokens.size() - T : 0;
    const int len = static_cast<int>(tokens.size() - start);
    std::fill(window.begin(), window.end(), 0);
    std::copy(tokens.begin() + static_cast<int64_t>(start), tokens.end(), window.begin());
    k::copy_from_host(ctx, in_dev.data, window.data(), static_cast<int64_t>(T) * 4);
    model.forward(ctx, in_dev.i32(), 1);    // causal: position len-1 sees only the real tokens
    const Tensor& logits = model.logits();  // (1, T, Vp) of the activation type
    const size_t esize = dtype_size(logits.dtype);
    const char* last_row = static_cast<const char*>(logits.data) + static_cast<int64_t>(len - 1) * Vp * esize;
    k::copy_to_host(ctx, row_stored.data(), last_row, static_cast<int64_t>(Vp * esize));
    k::synchronize(ctx);  // row is read now, window rewritten next
    widen_to_f32(act, row_stored.data(), row.data(), Vp);
    for (int v = 0; v < V; ++v) cand[v] = {row[v], v};
    const int kk = top_k > 0 ? std::min(top_k, V) : V;
    std::partial_sort(cand.begin(), cand.begin() + kk, cand.end(), [](auto& a, auto& b) { return a.first > b.first; });
    double z = 0.0;
    std::vector<double> p(static_cast<size_t>(kk));
    for (int j = 0; j < kk; ++j) z += p[j] = std::exp((cand[j].first - cand[0].first) / temperature);
    double u = rng::uniform(seed, rng::stream_of("sample"), static_cast<uint64_t>(i)) * z;
    int pick = cand[kk - 1].second;
    for (int j = 0; j < kk; ++j) {
      if ((u -= p[j]) <= 0.0) {
        pick = cand[j].second;
        break;
      }
    }
    tokens.push_back(pick);
  }
  std::string text;
  for (size_t i = prompt_len; i < tokens.size(); ++i) text += static_cast<char>(tokens[i]);
  return text;
}

}  // namespace hpct::gpt
