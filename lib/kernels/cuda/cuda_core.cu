// CUDA backend, core group (cuda_kernels.hpp): memory helpers, reductions, scale, AdamW, SGD, residual, GELU, ReLU,
// the embedding (serial and vocab-parallel), LayerNorm and the storage-type casts. The CPU backend
// (cpu/cpu_layers.cpp, cpu_loss_optim.cpp, cpu_sgd.cpp, cpu_conv.cpp's ReLU) is the reference: each kernel below evaluates the same float expressions in the
// same order per element, so that pointwise ops agree to an ulp or so (both compilers may contract a*b+c into an FMA,
// each in its own pattern; nvcc's division and sqrtf are IEEE-rounded, as on the CPU).
//
// Legend: B batch, T time, C channels, N = B*T rows (LayerNorm: N rows of C); vocab-parallel: this rank holds the
// embedding rows [v0, v0+Vl) of the padded vocabulary Vp.
//
// Storage types (kernels.hpp): the ops templated on A run for A = float, A = bf16 and A = fp16 (instantiated at the end
// of this file); their kernels take the device storage type S = DeviceStorage<A> (cuda_common.cuh), compute in float
// and round each output once (cuda_device_common.cuh). Parameter gradients (dwte, dwpe, LayerNorm dweight / dbias),
// LayerNorm's mean and rstd and every reduction stay float. The pointwise kernels move 16-byte packs where the buffers
// allow (pointwise_packs: the same results as element by element); LayerNorm's rows read 16-byte packs of 16-bit types
// where the row length and alignment allow (row_pack), and float rows element by element, in the order they always
// have.
//
// Every op is asynchronous on stream_of(ctx) (null: the default stream), checks its host-side arguments and its
// launches, never allocates and never synchronizes (except synchronize(), whose contract is to block the host).
//
// Determinism: no floating-point atomics anywhere in this file. Every reduction runs in an order fixed by the
// shapes and the (constant) launch configuration, never by timing, so a run reproduces itself bit for bit:
//   - sum / sum_squares_accumulate: one block of 1024 threads, each summing a fixed strided subset in double, then a
//     fixed tree (block_sum). One block is not the fastest (see the note at reduce_kernel), but it needs no scratch;
//   - sum_squares_ranges (the global gradient norm): one block per chunk of the planned table, each chunk as above,
//     then one block over the partials in chunk order;
//   - encoder dwte: each (row, column) is owned by one thread, which adds the positions in increasing order: the
//     CPU's order, so dwte equals the CPU backend's bit for bit; dwpe likewise (one thread per (t, c), b in order);
//   - LayerNorm dweight/dbias: computed with dinp in one kernel, each block's rows in per-warp float accumulators
//     added in double into the block's row of the device's partials, then one kernel adds the rows in order
//     (cuda_device_common.cuh, "full-grid column reductions").
//
// Invalid tokens: the CPU backend throws on a negative token; a kernel cannot, and the host never reads device data,
// so the forward embeddings write NaN for a negative token (the loss turns NaN and the run's NaN check stops it) and
// the backward ones skip it. The upper bound Vp is not passed to the serial encoder (as on the CPU: the data loader
// checks the tokens against the vocabulary).
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>

#include "core/error.hpp"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_core_kernels.cuh"
#include "kernels/cuda/cuda_kernels.hpp"
#include "kernels/kernels.hpp"

namespace hpct::kernels::cuda {
namespace {

// ---- host-side helpers (the dispatch checked each op's shape and arguments: kernels/op_checks.hpp) -----------------
template <typename S>
void launch_encoder_forward(const ExecContext& ctx, const char* op, S* out, const int32_t* inp, const S* wte,
                            const S* wpe, int64_t v0, int64_t Vl, int B, int T, int C) {
  const int64_t N = static_cast<int64_t>(B) * T;
  if (N == 0) return;
  const int64_t total = N * C;
  HPCT_LAUNCH(encoder_forward_kernel<S>, elementwise_shape(total), stream_of(ctx), out, inp, wte, wpe, v0, Vl, N, T, C);
  HPCT_CUDA_LAUNCH_CHECK(op);
}

template <typename S>
void launch_encoder_backward(const ExecContext& ctx, const char* op, float* dwte, float* dwpe, const S* dout,
                             const int32_t* inp, int64_t v0, int64_t Vl, int B, int T, int C) {
  const int64_t N = static_cast<int64_t>(B) * T;
  if (N == 0) return;
  HPCT_LAUNCH(encoder_backward_wte_kernel<S>, encoder_wte_shape(C), stream_of(ctx), dwte, dout, inp, v0, Vl, N, C);
  HPCT_CUDA_LAUNCH_CHECK(op);
  if (dwpe) {
    const int64_t total = static_cast<int64_t>(T) * C;
    HPCT_LAUNCH(encoder_backward_wpe_kernel<S>, elementwise_shape(total), stream_of(ctx), dwpe, dout, B, T, C);
    HPCT_CUDA_LAUNCH_CHECK(op);
  }
}

template <bool kSquare>
void launch_reduce(const ExecContext& ctx, const char* op, const float* x, int64_t n, float* out_sum, double* out_acc) {
  HPCT_CHECK(n >= 0, "{}: n={} is negative", op, n);
  HPCT_CHECK(x != nullptr || n == 0, "{}: x is null", op);
  HPCT_LAUNCH(reduce_kernel<kSquare>, reduce_shape(), stream_of(ctx), x, n, float4_aligned(x), out_sum, out_acc);
  HPCT_CUDA_LAUNCH_CHECK(op);
}

}  // namespace

// ---- the reduction partials (cuda_common.cuh) -----------------------------------------------------------------------
void* device_lifetime_buffer(void* (&table)[kMaxDevices], size_t bytes, const char* what) {
  static std::mutex mu;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  HPCT_CHECK(dev >= 0 && dev < kMaxDevices, "kernels::cuda: device {} is beyond the {} table ({})", dev, what,
             kMaxDevices);
  std::lock_guard<std::mutex> lock(mu);
  if (!table[dev]) CUDA_CHECK(cudaMalloc(&table[dev], bytes));
  return table[dev];
}

double* reduce_partials(const char* op, int64_t min_bytes) {
  HPCT_CHECK(min_bytes <= static_cast<int64_t>(kCudaReducePartialsBytes),
             "{}: this shape needs {} bytes of reduction partials per row group; the device keeps {}", op, min_bytes,
             kCudaReducePartialsBytes);
  static void* buffers[kMaxDevices] = {};
  return static_cast<double*>(device_lifetime_buffer(buffers, kCudaReducePartialsBytes, "reduction partials"));
}

// ---- embedding ----------------------------------------------------------------------------------------------------
template <typename A>
void encoder_forward(const ExecContext& ctx, A* out, const int32_t* inp, const A* wte, const A* wpe, int B, int T,
                     int C) {
  launch_encoder_forward(ctx, "encoder_forward", dev_ptr(out), inp, dev_ptr(wte), dev_ptr(wpe), 0,
                         std::numeric_limits<int64_t>::max(), B, T, C);
}

template <typename A>
void encoder_backward(const ExecContext& ctx, float* dwte, float* dwpe, const A* dout, const int32_t* inp, int B, int T,
                      int C) {
  launch_encoder_backward(ctx, "encoder_backward", dwte, dwpe, dev_ptr(dout), inp, 0,
                          std::numeric_limits<int64_t>::max(), B, T, C);
}

template <typename A>
void encoder_forward_vocab_parallel(const ExecContext& ctx, A* out, const int32_t* inp, const A* wte_local,
                                    const A* wpe, int v0, int Vl, int B, int T, int C) {
  launch_encoder_forward(ctx, "encoder_forward_vocab_parallel", dev_ptr(out), inp, dev_ptr(wte_local), dev_ptr(wpe), v0,
                         Vl, B, T, C);
}

template <typename A>
void encoder_backward_vocab_parallel(const ExecContext& ctx, float* dwte_local, float* dwpe, const A* dout,
                                     const int32_t* inp, int v0, int Vl, int B, int T, int C) {
  // dwpe (when set) gets sum_b dout on every TP rank, as kernels.hpp says
  launch_encoder_backward(ctx, "encoder_backward_vocab_parallel", dwte_local, dwpe, dev_ptr(dout), inp, v0, Vl, B, T,
                          C);
}

// ---- LayerNorm ----------------------------------------------------------------------------------------------------
template <typename A>
void layernorm_forward(const ExecContext& ctx, A* out, float* mean, float* rstd, const A* inp, const A* weight,
                       const A* bias, int N, int C) {
  using S = DeviceStorage<A>;
  if (N == 0) return;
  with_row_pack<S>(row_pack<S>(C, {out, inp, weight, bias}), [&](auto pack) {
    constexpr int P = decltype(pack)::value;
    HPCT_LAUNCH((layernorm_forward_kernel<S, P>), layernorm_rows_shape(N), stream_of(ctx), dev_ptr(out), mean, rstd,
                dev_ptr(inp), dev_ptr(weight), dev_ptr(bias), N, C);
    HPCT_CUDA_LAUNCH_CHECK("layernorm_forward");
  });
}

template <typename A>
void layernorm_backward(const ExecContext& ctx, A* dinp, float* dweight, float* dbias, const A* dout, const A* inp,
                        const A* weight, const float* mean, const float* rstd, int N, int C) {
  using S = DeviceStorage<A>;
  if (N == 0) return;
  const LayernormBackwardLaunch launch = layernorm_backward_launch(N, C, kCudaReducePartialsBytes);
  // the kernel's shared memory is checked against the device by HPCT_LAUNCH (16 C bytes: C <= 14,528 on an H100)
  double* partials = reduce_partials("layernorm_backward", 2 * int64_t{C} * static_cast<int64_t>(sizeof(double)));
  with_row_pack<S>(row_pack<S>(C, {dinp, dout, inp, weight}), [&](auto pack) {
    constexpr int P = decltype(pack)::value;
    HPCT_LAUNCH((layernorm_backward_kernel<S, P>), launch.shape, stream_of(ctx), dev_ptr(dinp), partials, dev_ptr(dout),
                dev_ptr(inp), dev_ptr(weight), mean, rstd, int64_t{N}, C, launch.rows.rows_per_group);
    HPCT_CUDA_LAUNCH_CHECK("layernorm_backward");
  });
  HPCT_LAUNCH(column_partials_kernel, column_partials_shape(2 * C, launch.rows.groups), stream_of(ctx), dweight, dbias,
              partials, launch.rows.groups, 2 * C, C);
  HPCT_CUDA_LAUNCH_CHECK("layernorm_backward");
}

template <typename A>
void residual_layernorm_forward(const ExecContext& ctx, A* residual, A* out, float* mean, float* rstd, const A* a,
                                const A* b, const A* weight, const A* bias, int N, int C) {
  using S = DeviceStorage<A>;
  if (N == 0) return;
  // the LayerNorm's pack width as layernorm_forward would take it; the fused kernel only where a and b allow it too
  // (a different width would sum the row in another order: not the two ops' bits)
  const int P = row_pack<S>(C, {out, residual, weight, bias});
  if (row_pack<S>(C, {out, residual, weight, bias, a, b}) != P) {
    residual_forward(ctx, residual, a, b, static_cast<int64_t>(N) * C);
    layernorm_forward(ctx, out, mean, rstd, residual, weight, bias, N, C);
    return;
  }
  with_row_pack<S>(P, [&](auto pack) {
    constexpr int kP = decltype(pack)::value;
    HPCT_LAUNCH((residual_layernorm_forward_kernel<S, kP>), layernorm_rows_shape(N), stream_of(ctx), dev_ptr(residual),
                dev_ptr(out), mean, rstd, dev_ptr(a), dev_ptr(b), dev_ptr(weight), dev_ptr(bias), N, C);
    HPCT_CUDA_LAUNCH_CHECK("residual_layernorm_forward");
  });
}

// ---- pointwise ----------------------------------------------------------------------------------------------------
template <typename A>
void gelu_forward(const ExecContext& ctx, A* out, const A* inp, int64_t n) {
  using S = DeviceStorage<A>;
  if (n == 0) return;
  const int64_t packs = pointwise_packs<S>(n, {out, inp});
  HPCT_LAUNCH(gelu_forward_kernel<S>, pointwise_shape<S>(n, packs), stream_of(ctx), dev_ptr(out), dev_ptr(inp), n,
              packs);
  HPCT_CUDA_LAUNCH_CHECK("gelu_forward");
}

template <typename A>
void gelu_backward(const ExecContext& ctx, A* dinp, const A* inp, const A* dout, int64_t n) {
  using S = DeviceStorage<A>;
  if (n == 0) return;
  const int64_t packs = pointwise_packs<S>(n, {dinp, inp, dout});
  HPCT_LAUNCH(gelu_backward_kernel<S>, pointwise_shape<S>(n, packs), stream_of(ctx), dev_ptr(dinp), dev_ptr(inp),
              dev_ptr(dout), n, packs);
  HPCT_CUDA_LAUNCH_CHECK("gelu_backward");
}

namespace {
// residual_kernel over n values (kRelu: with the ReLU of each sum), the launch of both ops below
template <bool kRelu, typename A>
void launch_residual(const ExecContext& ctx, const char* op, A* out, const A* a, const A* b, int64_t n) {
  using S = DeviceStorage<A>;
  if (n == 0) return;
  const int64_t packs = pointwise_packs<S>(n, {out, a, b});
  HPCT_LAUNCH((residual_kernel<S, kRelu>), pointwise_shape<S>(n, packs), stream_of(ctx), dev_ptr(out), dev_ptr(a),
              dev_ptr(b), n, packs);
  HPCT_CUDA_LAUNCH_CHECK(op);
}
}  // namespace

template <typename A>
void residual_forward(const ExecContext& ctx, A* out, const A* a, const A* b, int64_t n) {
  launch_residual<false>(ctx, "residual_forward", out, a, b, n);
}

template <typename A>
void relu_forward(const ExecContext& ctx, A* out, const A* inp, int64_t n) {
  using S = DeviceStorage<A>;
  if (n == 0) return;
  const int64_t packs = pointwise_packs<S>(n, {out, inp});
  HPCT_LAUNCH(relu_forward_kernel<S>, pointwise_shape<S>(n, packs), stream_of(ctx), dev_ptr(out), dev_ptr(inp), n,
              packs);
  HPCT_CUDA_LAUNCH_CHECK("relu_forward");
}

template <typename A>
void residual_relu_forward(const ExecContext& ctx, A* out, const A* a, const A* b, int64_t n) {
  launch_residual<true>(ctx, "residual_relu_forward", out, a, b, n);
}

template <typename A>
void residual_relu_backward(const ExecContext& ctx, A* dinp, const A* a, const A* b, const A* out, int64_t n) {
  using S = DeviceStorage<A>;
  if (n == 0) return;
  const int64_t packs = pointwise_packs<S>(n, {dinp, a, b, out});
  HPCT_LAUNCH(residual_relu_backward_kernel<S>, pointwise_shape<S>(n, packs), stream_of(ctx), dev_ptr(dinp), dev_ptr(a),
              dev_ptr(b), dev_ptr(out), n, packs);
  HPCT_CUDA_LAUNCH_CHECK("residual_relu_backward");
}

template <typename A>
void relu_backward(const ExecContext& ctx, A* dinp, const A* dout, const A* out, int64_t n) {
  using S = DeviceStorage<A>;
  if (n == 0) return;
  const int64_t packs = pointwise_packs<S>(n, {dinp, dout, out});
  HPCT_LAUNCH(relu_backward_kernel<S>, pointwise_shape<S>(n, packs), stream_of(ctx), dev_ptr(dinp), dev_ptr(dout),
              dev_ptr(out), n, packs);
  HPCT_CUDA_LAUNCH_CHECK("relu_backward");
}

// ---- storage-type conversions -------------------------------------------------------------------------------------
namespace {
// dst = src converted element by element (cast_kernel: one rounding to nearest even, or exact widening).
template <typename To, typename From>
void launch_cast(const ExecContext& ctx, const char* op, To* dst, const From* src, int64_t n) {
  if (n == 0) return;
  const int64_t packs = cast_packs(n, dst, src);
  HPCT_LAUNCH((cast_kernel<DeviceStorage<To>, DeviceStorage<From>>), cast_shape(n, packs), stream_of(ctx), dev_ptr(dst),
              dev_ptr(src), n, packs);
  HPCT_CUDA_LAUNCH_CHECK(op);
}
}  // namespace

void cast(const ExecContext& ctx, bf16* dst, const float* src, int64_t n) {
  launch_cast(ctx, "cast (float -> bf16)", dst, src, n);
}
void cast(const ExecContext& ctx, float* dst, const bf16* src, int64_t n) {
  launch_cast(ctx, "cast (bf16 -> float)", dst, src, n);
}
void cast(const ExecContext& ctx, fp16* dst, const float* src, int64_t n) {
  launch_cast(ctx, "cast (float -> fp16)", dst, src, n);
}
void cast(const ExecContext& ctx, float* dst, const fp16* src, int64_t n) {
  launch_cast(ctx, "cast (fp16 -> float)", dst, src, n);
}

// ---- reductions and optimizers ------------------------------------------------------------------------------------
void sum(const ExecContext& ctx, float* out, const float* x, int64_t n) {
  launch_reduce<false>(ctx, "sum", x, n, out, nullptr);  // n == 0 still writes *out = 0
}

void sum_squares_ranges(const ExecContext& ctx, double* acc, const SquaresChunk* table, int64_t chunks,
                        double* partials) {
  HPCT_CHECK(chunks <= std::numeric_limits<int>::max(), "sum_squares_ranges: {} chunks exceed a grid", chunks);
  HPCT_LAUNCH(squares_chunk_kernel, table_chunks_shape(chunks), stream_of(ctx), table, partials);
  HPCT_LAUNCH(partials_sum_kernel, reduce_shape(), stream_of(ctx), partials, chunks, acc);
}

void sum_squares_accumulate(const ExecContext& ctx, double* out, const float* x, int64_t n) {
  launch_reduce<true>(ctx, "sum_squares_accumulate", x, n, nullptr, out);
}

void scale(const ExecContext& ctx, float* x, float s, int64_t n) {
  if (n == 0) return;
  HPCT_LAUNCH(scale_kernel, elementwise_shape(n), stream_of(ctx), x, s, n);
  HPCT_CUDA_LAUNCH_CHECK("scale");
}

void adamw_update(const ExecContext& ctx, float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) {
  if (n == 0) return;
  const AdamwScalars k = adamw_scalars(lr, beta1, beta2, weight_decay, t);
  HPCT_LAUNCH(adamw_kernel, elementwise_shape(n), stream_of(ctx), params, grads, m, v, n, beta1, beta2, eps, grad_scale,
              k.decay, k.step_size, k.bc2_sqrt, k.one_minus_b1, k.one_minus_b2);
  HPCT_CUDA_LAUNCH_CHECK("adamw_update");
}

void adamw_update_chunks(const ExecContext& ctx, const AdamwChunk* table, int64_t chunks, float lr, float beta1,
                         float beta2, float eps, float weight_decay, float grad_scale, int t, DType copy) {
  HPCT_CHECK(chunks <= std::numeric_limits<int>::max(), "adamw_update_chunks: {} chunks exceed a grid", chunks);
  const AdamwScalars k = adamw_scalars(lr, beta1, beta2, weight_decay, t);
  const float no_decay = adamw_scalars(lr, beta1, beta2, 0.0f, t).decay;  // 1.0f: as adamw_update with 0
  auto launch = [&](auto copy_type) {
    using Copy = typename decltype(copy_type)::type;
    HPCT_LAUNCH(adamw_chunks_kernel<Copy>, table_chunks_shape(chunks), stream_of(ctx), table, beta1, beta2, eps,
                grad_scale, k.decay, no_decay, k.step_size, k.bc2_sqrt, k.one_minus_b1, k.one_minus_b2);
  };
  if (copy == DType::BF16) launch(type_tag<__nv_bfloat16>{});
  else if (copy == DType::F16)
    launch(type_tag<__half>{});
  else
    launch(type_tag<void>{});
  HPCT_CUDA_LAUNCH_CHECK("adamw_update_chunks");
}

void sgd_update(const ExecContext& ctx, float* params, const float* grads, float* momentum_buf, int64_t n, float lr,
                float momentum, float dampening, float weight_decay, bool nesterov, float grad_scale, bool first_step) {
  const SgdMode mode = sgd_mode(momentum, first_step);
  if (n == 0) return;
  const float take = 1.0f - dampening;
  HPCT_LAUNCH(sgd_kernel, elementwise_shape(n), stream_of(ctx), params, grads, momentum_buf, n, lr, momentum, take,
              weight_decay, nesterov, grad_scale, mode);
  HPCT_CUDA_LAUNCH_CHECK("sgd_update");
}

// ---- memory helpers -----------------------------------------------------------------------------------------------
// All stream-ordered on ctx.stream and asynchronous with respect to the host, unlike the CPU backend's (which have
// completed when they return). Callers therefore synchronize(ctx) before reading what copy_to_host wrote, and before
// modifying or freeing the host source of a copy_from_host (cudaMemcpyAsync from pinned memory reads it later; from
// pageable memory the runtime stages it before returning, but callers must not rely on which kind they hold).
void fill_zero(const ExecContext& ctx, void* dst, int64_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<size_t>(bytes), stream_of(ctx)));
}

// With pageable (not page-locked) host memory the CUDA runtime itself may block the host until the stream reaches
// the copy: a device-to-host cudaMemcpyAsync into pageable memory returns only once the copy is done, and one from
// pageable memory may first synchronize with the stream to stage it. When NCCL work can be queued on the stream (a
// sync guard is installed) that wait would be unbounded, so the stream is first drained through the guard (bounded by
// comm.timeout_s, exec_context.hpp); the runtime's own wait is then only for the copy. Page-locked memory is not
// affected. (The callers copy to the host right before a synchronize and from the host right after one, so in
// practice this adds no synchronisation point.)
namespace {
void drain_before_pageable_copy(const ExecContext& ctx, const void* host, const char* what) {
  if (ctx.sync_guard == nullptr) return;
  cudaPointerAttributes attr{};
  const cudaError_t rc = cudaPointerGetAttributes(&attr, host);
  if (rc != cudaSuccess) (void)cudaGetLastError();  // older runtimes: an unregistered pointer is an error
  if (rc == cudaSuccess && attr.type != cudaMemoryTypeUnregistered) return;  // page-locked, managed or device
  ctx.sync_guard->synchronize(ctx.stream, what);
}
}  // namespace

// The host data is valid only after synchronize(ctx) (or another synchronization of ctx.stream).
void copy_to_host(const ExecContext& ctx, void* host_dst, const void* src, int64_t bytes) {
  if (bytes == 0) return;
  drain_before_pageable_copy(ctx, host_dst, "copy_to_host into pageable host memory (the stream before the copy)");
  CUDA_CHECK(cudaMemcpyAsync(host_dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream_of(ctx)));
}

// The host source must stay unchanged until synchronize(ctx).
void copy_from_host(const ExecContext& ctx, void* dst, const void* host_src, int64_t bytes) {
  if (bytes == 0) return;
  drain_before_pageable_copy(ctx, host_src, "copy_from_host from pageable host memory (the stream before the copy)");
  CUDA_CHECK(cudaMemcpyAsync(dst, host_src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_of(ctx)));
}

void copy_device(const ExecContext& ctx, void* dst, const void* src, int64_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream_of(ctx)));
}

// Blocks the host until all work queued on ctx.stream has completed; also where asynchronous faults of the ops
// before it surface (as a CUDA error naming the failed synchronize). With a sync guard (exec_context.hpp: installed by
// ParallelContext when NCCL work can be queued on the stream) the wait is the guard's: bounded by comm.timeout_s,
// aborting the NCCL communicators and throwing on a stall; without one, cudaStreamSynchronize (nothing on the stream
// can wait on a peer then).
void synchronize(const ExecContext& ctx) {
  if (ctx.sync_guard != nullptr) {
    ctx.sync_guard->synchronize(ctx.stream, "kernels::synchronize of the compute stream");
    return;
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
}

// cudaHostRegister pins the pages the range spans (the driver rounds to pages) and maps them for the device's copy
// engines: copies with it are then asynchronous and run at the link's speed. cudaHostRegisterDefault: portable to the
// current device only, which is the rank's one GPU.
void host_register(const ExecContext& ctx, void* host, int64_t bytes) {
  (void)ctx;
  const cudaError_t rc = cudaHostRegister(host, static_cast<size_t>(bytes), cudaHostRegisterDefault);
  HPCT_CHECK(rc == cudaSuccess,
             "cudaHostRegister of {:.1f} MiB at {} failed: {} (already registered, or the "
             "locked-memory limit, ulimit -l, is too low)",
             bytes / 1048576.0, host, cudaGetErrorString(rc));
}
void host_unregister(const ExecContext& ctx, void* host) {
  (void)ctx;
  const cudaError_t rc = cudaHostUnregister(host);
  HPCT_CHECK(rc == cudaSuccess, "cudaHostUnregister at {} failed: {}", host, cudaGetErrorString(rc));
}

// ---- the three storage types of the templated ops (kernels.hpp) ---------------------------------------------------
#define HPCT_INSTANTIATE_CORE(A)                                                                                      \
  template void encoder_forward<A>(const ExecContext&, A*, const int32_t*, const A*, const A*, int, int, int);        \
  template void encoder_backward<A>(const ExecContext&, float*, float*, const A*, const int32_t*, int, int, int);     \
  template void encoder_forward_vocab_parallel<A>(const ExecContext&, A*, const int32_t*, const A*, const A*, int,    \
                                                  int, int, int, int);                                                \
  template void encoder_backward_vocab_parallel<A>(const ExecContext&, float*, float*, const A*, const int32_t*, int, \
                                                   int, int, int, int);                                               \
  template void layernorm_forward<A>(const ExecContext&, A*, float*, float*, const A*, const A*, const A*, int, int); \
  template void layernorm_backward<A>(const ExecContext&, A*, float*, float*, const A*, const A*, const A*,           \
                                      const float*, const float*, int, int);                                          \
  template void gelu_forward<A>(const ExecContext&, A*, const A*, int64_t);                                           \
  template void gelu_backward<A>(const ExecContext&, A*, const A*, const A*, int64_t);                                \
  template void residual_forward<A>(const ExecContext&, A*, const A*, const A*, int64_t);                             \
  template void residual_layernorm_forward<A>(const ExecContext&, A*, A*, float*, float*, const A*, const A*,         \
                                              const A*, const A*, int, int);                                          \
  template void relu_forward<A>(const ExecContext&, A*, const A*, int64_t);                                           \
  template void residual_relu_forward<A>(const ExecContext&, A*, const A*, const A*, int64_t);                        \
  template void relu_backward<A>(const ExecContext&, A*, const A*, const A*, int64_t);                                \
  template void residual_relu_backward<A>(const ExecContext&, A*, const A*, const A*, const A*, int64_t);
HPCT_INSTANTIATE_CORE(float)
HPCT_INSTANTIATE_CORE(bf16)
HPCT_INSTANTIATE_CORE(fp16)
#undef HPCT_INSTANTIATE_CORE

}  // namespace hpct::kernels::cuda
