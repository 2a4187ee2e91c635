#include "train/checkpoint/protocol.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <tuple>
#include <map>

#include <fmt/ranges.h>

#include "ckpt/shared_shard.hpp"
#include "core/format.hpp"
#include "core/log.hpp"
#include "core/test_fault.hpp"
#include "core/timer.hpp"
#include "kernels/kernels.hpp"

namespace hpct::train {

namespace fs = std::filesystem;

std::vector<std::string> allgather_strings(comm::Communicator& comm, const std::string& mine, const std::string& what) {
  const int n = comm.size();
  std::vector<int64_t> lens(static_cast<size_t>(n), 0);
  int64_t my_len = static_cast<int64_t>(mine.size());
  comm.allgather(&my_len, lens.data(), 1, DType::I64, what + " (lengths)");
  int64_t total = 0;
  for (int64_t l : lens) total += l;
  std::string all(static_cast<size_t>(total), '\0');
  int64_t off = 0;
  for (int r = 0; r < comm.rank(); ++r) off += lens[r];
  std::copy(mine.begin(), mine.end(), all.begin() + off);
  if (total > 0) comm.allgather_v_async(all.data() + off, all.data(), lens, DType::U8, what)->wait();
  std::vector<std::string> out;
  off = 0;
  for (int r = 0; r < n; ++r) {
    out.push_back(all.substr(static_cast<size_t>(off), static_cast<size_t>(lens[r])));
    off += lens[r];
  }
  return out;
}

namespace {

// Share d of n of a flat range of length len (the first len % n shares one longer).
std::pair<int64_t, int64_t> share(int64_t len, int n, int d) {
  const int64_t base = len / n, extra = len % n;
  const int64_t begin = d * base + std::min<int64_t>(d, extra);
  return {begin, begin + base + (d < extra ? 1 : 0)};
}

// Pieces of the flat range [begin, end) of a local tensor of `shape` placed at `pl` in its global tensor,
// data at `data` (= local element `begin`): local boxes shifted by the placement's offset.
void add_pieces(std::vector<ckpt::Piece>& out, const std::string& dataset, const std::vector<int64_t>& shape,
                const TensorPlacement& pl, int64_t begin, int64_t end, const float* data) {
  if (begin >= end) return;
  for (const ckpt::Box& b : ckpt::flat_range_to_boxes(shape, begin, end)) {
    ckpt::Piece p;
    p.dataset = dataset;
    p.global_shape = pl.global_shape;
    p.offset = b.offset;
    for (size_t a = 0; a < p.offset.size(); ++a) p.offset[a] += pl.offset[a];
    p.count = b.count;
    p.split_axis = pl.split_axis;
    p.replica = 0;
    p.dtype = DType::F32;
    p.data = data + (b.flat_begin - begin);
    out.push_back(std::move(p));
  }
}

}  // namespace

OptimizerState optimizer_state(optim::Optimizer& opt) {
  OptimizerState s;
  s.segments = &opt.segments();
  for (optim::Optimizer::StateBuffer& b : opt.state_buffers()) s.buffers.emplace_back(b.name, std::move(b.of_segment));
  const std::vector<optim::Segment>* segs = &opt.segments();
  if (std::any_of(segs->begin(), segs->end(), [](const optim::Segment& g) { return g.param != nullptr; }))
    s.masters = [segs](size_t i) { return (*segs)[i].param; };
  return s;
}

namespace {
// A host slab with the same tensors (names, shapes, dtypes) as `like`.
std::unique_ptr<Slab> host_twin(const Slab& like) {
  auto h = std::make_unique<Slab>(like.name() + " (host staging)", Device::CPU);
  for (const Tensor& t : like.tensors()) h->add(t.name, t.shape, t.dtype);
  h->allocate();
  return h;
}
}  // namespace

CheckpointStaging::CheckpointStaging(const ExecContext& ctx, Slab& params, OptimizerState opt, Slab* extra,
                                     bool snapshot)
    : ctx_(ctx), params_(params), opt_(std::move(opt)), extra_(extra) {
  if (ctx_.device == Device::CPU && !snapshot) return;  // zero-copy: the views are the run's own tensors
  staged_ = true;
  if (!opt_.masters) host_params_ = host_twin(params_);  // ZeRO-3: the masters are staged with the state below
  if (extra_) host_extra_ = host_twin(*extra_);
  // one host buffer per optimizer state buffer, laid out like the optimizer's (segment i at its state_offset)
  const std::vector<optim::Segment>& segs = *opt_.segments;
  int64_t numel = 0;
  for (const optim::Segment& sg : segs) numel = std::max(numel, sg.state_offset + sg.numel());
  host_state_ = std::make_unique<Slab>("optimizer state (host staging)", Device::CPU);
  for (const auto& [name, state] : opt_.buffers) host_state_->add(name, {numel});
  if (opt_.masters) host_state_->add("masters", {numel});
  host_state_->allocate();
  host_opt_.segments = opt_.segments;
  const std::vector<optim::Segment>* sp = opt_.segments;  // owned by the optimizer, which outlives the staging
  for (size_t b = 0; b < opt_.buffers.size(); ++b) {
    float* base = host_state_->tensors()[b].f32();
    host_opt_.buffers.emplace_back(opt_.buffers[b].first,
                                   [base, sp](size_t i) { return base + (*sp)[i].state_offset; });
  }
  if (opt_.masters) {
    float* base = host_state_->tensors()[opt_.buffers.size()].f32();
    host_opt_.masters = [base, sp](size_t i) { return base + (*sp)[i].state_offset; };
  }
  // On CUDA the host twins are page-locked: a save's copies then run asynchronously at the link's speed and the
  // snapshot does not drain the stream through pageable memory. HPCT_CKPT_STAGING=pageable keeps them pageable (the
  // benchmark's control).
  const char* mode = std::getenv("HPCT_CKPT_STAGING");
  if (ctx_.device != Device::CPU && !(mode != nullptr && std::string(mode) == "pageable")) {
    for (Slab* s : {host_params_.get(), host_extra_.get(), host_state_.get()})
      if (s != nullptr && s->base() != nullptr && s->bytes() > 0) {
        kernels::host_register(ctx_, s->base(), static_cast<int64_t>(s->bytes()));
        registered_.push_back(s->base());
      }
  }
}

CheckpointStaging::~CheckpointStaging() {
  for (void* p : registered_) {
    try {
      kernels::host_unregister(ctx_, p);
    } catch (const std::exception& e) {  // a destructor cannot throw; the memory is freed by the slabs all the same
      std::fprintf(stderr, "hpctrain: checkpoint staging: %s\n", e.what());
    }
  }
}

size_t CheckpointStaging::host_bytes() const {
  size_t n = 0;
  for (const auto* s : {host_params_.get(), host_extra_.get(), host_state_.get()})
    if (s) n += s->bytes();
  return n;
}

void CheckpointStaging::copy(bool to_host) {
  auto move = [&](void* dev, void* host, size_t bytes) {
    if (to_host) kernels::copy_to_host(ctx_, host, dev, static_cast<int64_t>(bytes));
    else
      kernels::copy_from_host(ctx_, dev, host, static_cast<int64_t>(bytes));
  };
  auto slab = [&](Slab& dev, Slab& host) {
    for (size_t i = 0; i < dev.tensors().size(); ++i)
      move(dev.tensors()[i].data, host.tensors()[i].data, dev.tensors()[i].bytes());
  };
  if (host_params_) slab(params_, *host_params_);
  if (extra_) slab(*extra_, *host_extra_);
  const std::vector<optim::Segment>& segs = *opt_.segments;
  for (size_t b = 0; b < opt_.buffers.size(); ++b)
    for (size_t i = 0; i < segs.size(); ++i)
      if (segs[i].numel() > 0)
        move(opt_.buffers[b].second(i), host_opt_.buffers[b].second(i), static_cast<size_t>(segs[i].numel()) * 4);
  if (opt_.masters)
    for (size_t i = 0; i < segs.size(); ++i)
      if (segs[i].numel() > 0) move(opt_.masters(i), host_opt_.masters(i), static_cast<size_t>(segs[i].numel()) * 4);
  // CUDA copies are asynchronous: the host views are valid (to_host), and may be reused (to_device), only now
  kernels::synchronize(ctx_);
}

void CheckpointStaging::to_host() {
  if (staged_) copy(true);
}

void CheckpointStaging::to_device() {
  if (staged_) copy(false);
}

std::vector<ckpt::Piece> checkpoint_pieces(parallel::ParallelContext& pc, Slab& params,
                                           const std::vector<TensorPlacement>& placements, const OptimizerState& opt,
                                           Slab* extra) {
  HPCT_CHECK(placements.size() == params.tensors().size(), "{} placements for {} tensors", placements.size(),
             params.tensors().size());
  HPCT_CHECK((params.device() == Device::CPU || opt.masters) && (!extra || extra->device() == Device::CPU),
             "a checkpoint writes host memory: pass CheckpointStaging's views of device tensors");
  const int D = pc.dp_size(), d = pc.dp_rank();
  comm::Communicator* replicas = pc.zero_replica_group();  // hybrid sharding: the shard's replicas, else null
  // Replicas over DP write disjoint flat shares; a tensor whose writer flag is off is written by another rank.
  std::vector<ckpt::Piece> pieces;
  for (size_t i = 0; i < params.tensors().size() && !opt.masters; ++i) {  // ZeRO-3: with the segments below
    const Tensor& t = params.tensors()[i];
    if (!placements[i].writer) continue;
    const auto [b, e] = share(t.numel(), D, d);
    add_pieces(pieces, "model/" + t.name, t.shape, placements[i], b, e, static_cast<const float*>(t.data) + b);
  }
  if (extra)  // replicated over DP, unsplit: disjoint flat shares as for the parameters
    for (const Tensor& t : extra->tensors()) {
      const auto [b, e] = share(t.numel(), D, d);
      const TensorPlacement whole{t.shape, std::vector<int64_t>(t.shape.size(), 0), -1, true};
      add_pieces(pieces, "model/" + t.name, t.shape, whole, b, e, static_cast<const float*>(t.data) + b);
    }
  const std::vector<optim::Segment>& segs = *opt.segments;
  const bool sharded = segs.size() != params.tensors().size() ||
                       std::any_of(segs.begin(), segs.end(), [&](const optim::Segment& s) {
                         return s.begin != 0 || s.end != params.tensors()[static_cast<size_t>(s.tensor)].numel();
                       });
  for (size_t i = 0; i < segs.size(); ++i) {
    const optim::Segment& s = segs[i];
    const size_t ti = static_cast<size_t>(s.tensor);
    const Tensor& t = params.tensors()[ti];
    if (!placements[ti].writer) continue;
    int64_t b = s.begin, e = s.end;
    if (!sharded) std::tie(b, e) = share(t.numel(), D, d);  // replicated state: write share d only
    if (sharded && replicas != nullptr) {  // hybrid sharding: every shard group holds it, each writes a part
      const auto [rb, re] = share(e - b, replicas->size(), replicas->rank());
      std::tie(b, e) = std::make_pair(s.begin + rb, s.begin + re);
    }
    for (const auto& [name, state] : opt.buffers)
      add_pieces(pieces, "optim/" + name + "/" + t.name, t.shape, placements[ti], b, e, state(i) + (b - s.begin));
    if (opt.masters)
      add_pieces(pieces, "model/" + t.name, t.shape, placements[ti], b, e, opt.masters(i) + (b - s.begin));
  }
  return pieces;
}

namespace {

int64_t piece_bytes(const std::vector<int64_t>& count, DType dtype) {
  int64_t n = static_cast<int64_t>(dtype_size(dtype));
  for (int64_t c : count) n *= c;
  return n;
}

// The test seam of a failed write (docs/contracts.md): HPCT_CKPT_FAIL_AT=<step>:<rank> makes that rank's shard write of
// that step fail as a full disk would, so that the tests can see a failed save reported and the previous checkpoint kept.
void fail_if_requested(int64_t step, int rank) {
  const char* v = std::getenv("HPCT_CKPT_FAIL_AT");
  if (v == nullptr) return;
  long long s = -1;
  int r = -1;
  if (std::sscanf(v, "%lld:%d", &s, &r) == 2 && s == step && r == rank)
    HPCT_FAIL("injected write failure (test hook HPCT_CKPT_FAIL_AT={})", v);
}

}  // namespace

SaveResult write_checkpoint(comm::Communicator& comm, const std::string& root, int keep, const ckpt::Attrs& attrs,
                            const std::vector<ckpt::Piece>& pieces, ckpt::BackgroundRemover* remover,
                            const ShardFiles& files) {
  Timer timer;
  SaveResult r;
  const int rank = comm.rank();
  const int64_t step = attrs.ints.at("step");
  const fs::path tmp = fs::path(root) / ckpt::tmp_step_dir_name(step);
  // Every phase ends in an agreement (a broadcast or an allgather of each rank's outcome), so a failure on one rank
  // stops every rank at the same point with the same message, and nothing after the failed phase runs: `latest` and the
  // checkpoint it names are untouched (the next save or commit removes the stale .tmp_step_N).
  std::string failed;
  if (rank == 0) {
    try {
      std::error_code ec;
      fs::create_directories(root, ec);
      HPCT_CHECK(!ec, "cannot create the checkpoint directory {}: {}", root, ec.message());
      fs::remove_all(tmp, ec);  // a stale attempt at the same step (a crash during an earlier write)
      fs::create_directories(tmp, ec);
      HPCT_CHECK(!ec, "cannot create {}: {}", tmp.string(), ec.message());
    } catch (const Error& e) {
      failed = fmt::format("rank 0: {}", e.cause());
    }
  }
  failed = comm::broadcast_string(comm, failed, 0, "checkpoint: temporary directory created");
  if (!failed.empty()) {
    r.error = failed;
    return r;
  }

  std::string entry;  // '+' and the manifest's JSON, or '-' and what failed on this rank
  try {
    if (files.mode == "per_rank") {
      fail_if_requested(step, rank);
      entry = "+" + ckpt::write_shard(tmp.string(), rank, pieces, &r.phases).to_json();
    } else {
      const ckpt::ShardManifest m = ckpt::write_shared_shard(files.comm, tmp.string(), files.file_name, rank, pieces,
                                                             &r.phases);
      fail_if_requested(step, rank);  // after the collective write, which every rank of files.comm must join
      entry = "+" + m.to_json();
    }
  } catch (const Error& e) {
    entry = fmt::format("-rank {}: {}", rank, e.cause());
  }
  Timer manifests;
  const std::vector<std::string> all = allgather_strings(comm, entry, "checkpoint: shard manifests");
  r.manifests_s = manifests.seconds();
  for (const auto& p : pieces) r.bytes_written += piece_bytes(p.count, p.dtype);

  std::string outcome;  // from rank 0: '+' <total bytes> ' ' <step directory>, or '-' and what failed
  if (rank == 0) {
    std::vector<std::string> errors;
    for (const std::string& s : all)
      if (s.front() == '-') errors.push_back(s.substr(1));
    if (!errors.empty()) {
      outcome = "-" + errors.front() +
                (errors.size() > 1 ? fmt::format(" (and {} more ranks failed)", errors.size() - 1) : "");
    } else {
      try {
        std::vector<ckpt::ShardManifest> shards;
        int64_t total = 0;
        for (const auto& s : all) {
          shards.push_back(ckpt::ShardManifest::from_json(s.substr(1)));
          for (const auto& p : shards.back().pieces) total += piece_bytes(p.count, p.dtype);
        }
        ckpt::write_index(tmp.string(), shards, attrs, &r.phases);
        const std::string dir = ckpt::commit(root, step, keep, &r.phases, remover);
        outcome = fmt::format("+{} {}", total, dir);
      } catch (const Error& e) {
        outcome = fmt::format("-rank 0: {}", e.cause());
      }
    }
  }
  // every rank returns only once the checkpoint is visible (or known to have failed)
  outcome = comm::broadcast_string(comm, outcome, 0, "checkpoint: commit");
  r.seconds = timer.seconds();
  if (outcome.front() == '-') {
    r.error = outcome.substr(1);
    return r;
  }
  const size_t sp = outcome.find(' ');
  r.total_bytes = std::stoll(outcome.substr(1, sp - 1));
  r.dir = outcome.substr(sp + 1);
  return r;
}

void load_checkpoint(const ckpt::Reader& reader, Slab& params, const std::vector<TensorPlacement>& placements,
                     const OptimizerState& opt, Slab* extra) {
  HPCT_CHECK(placements.size() == params.tensors().size(), "{} placements for {} tensors", placements.size(),
             params.tensors().size());
  HPCT_CHECK((params.device() == Device::CPU || opt.masters) && (!extra || extra->device() == Device::CPU),
             "load_checkpoint reads into host memory: pass CheckpointStaging's views of device tensors");
  const ResumeNoise& noise = resume_noise();  // a test seam (core/test_fault.hpp), inert in every real run
  auto global_box = [](const TensorPlacement& pl, std::vector<int64_t> off) {
    for (size_t a = 0; a < off.size(); ++a) off[a] += pl.offset[a];
    return off;
  };
  for (size_t i = 0; i < params.tensors().size(); ++i) {
    Tensor& t = params.tensors()[i];
    const TensorPlacement& pl = placements[i];
    const std::string ds = "model/" + t.name;
    HPCT_USAGE_CHECK(reader.has(ds), "checkpoint {} has no tensor {}: it was written for another model", reader.dir(),
                     ds);
    HPCT_USAGE_CHECK(reader.shape(ds) == pl.global_shape,
                     "checkpoint {}: tensor {} has another shape than this model's (global {})", reader.dir(), ds,
                     fmt::join(pl.global_shape, " x "));
    if (!opt.masters) {  // masters (bf16, ZeRO-3): the segments below
      reader.read(ds, pl.offset, t.shape, DType::F32, t.data);
      perturb_resumed_box(noise, t.name, pl.global_shape, pl.offset, t.shape, static_cast<float*>(t.data));
    }
  }
  if (extra)
    for (Tensor& t : extra->tensors()) {
      const std::string ds = "model/" + t.name;
      HPCT_USAGE_CHECK(reader.has(ds), "checkpoint {} has no tensor {}: it was written for another model", reader.dir(),
                       ds);
      HPCT_USAGE_CHECK(reader.shape(ds) == t.shape, "checkpoint {}: tensor {} has another shape than this model's",
                       reader.dir(), ds);
      reader.read(ds, std::vector<int64_t>(t.shape.size(), 0), t.shape, DType::F32, t.data);
    }
  const std::vector<optim::Segment>& segs = *opt.segments;
  for (size_t i = 0; i < segs.size(); ++i) {
    const optim::Segment& s = segs[i];
    const TensorPlacement& pl = placements[static_cast<size_t>(s.tensor)];
    const Tensor& t = params.tensors()[static_cast<size_t>(s.tensor)];
    if (s.numel() == 0) continue;
    auto read_range = [&](const std::string& ds, float* dst) {
      for (const ckpt::Box& b : ckpt::flat_range_to_boxes(t.shape, s.begin, s.end))
        reader.read(ds, global_box(pl, b.offset), b.count, DType::F32, dst + (b.flat_begin - s.begin));
    };
    for (const auto& [which, state] : opt.buffers) {
      const std::string ds = fmt::format("optim/{}/{}", which, t.name);
      HPCT_USAGE_CHECK(reader.has(ds), "checkpoint {} has no optimizer state {}", reader.dir(), ds);
      read_range(ds, state(i));
    }
    if (opt.masters) {
      float* dst = opt.masters(i);
      read_range("model/" + t.name, dst);
      for (const ckpt::Box& b : ckpt::flat_range_to_boxes(t.shape, s.begin, s.end))
        perturb_resumed_box(noise, t.name, pl.global_shape, global_box(pl, b.offset), b.count,
                            dst + (b.flat_begin - s.begin));
    }
  }
}

void load_parameters(const ckpt::TensorSource& src, Slab& params, const std::vector<TensorPlacement>& placements,
                     const OptimizerState& opt) {
  HPCT_CHECK(placements.size() == params.tensors().size(), "{} placements for {} tensors", placements.size(),
             params.tensors().size());
  HPCT_CHECK(params.device() == Device::CPU || opt.masters,
             "load_parameters reads into host memory: pass CheckpointStaging's views of device tensors");
  for (size_t i = 0; i < params.tensors().size(); ++i) {
    Tensor& t = params.tensors()[i];
    const TensorPlacement& pl = placements[i];
    HPCT_USAGE_CHECK(src.has(t.name), "{} has no tensor {}", src.describe(), t.name);
    HPCT_USAGE_CHECK(src.shape(t.name) == pl.global_shape, "{}: tensor {} has shape ({}), this model's is ({})",
                     src.describe(), t.name, fmt::join(src.shape(t.name), ", "), fmt::join(pl.global_shape, ", "));
    if (!opt.masters) src.read(t.name, pl.offset, t.shape, static_cast<float*>(t.data));  // ZeRO-3: below
  }
  if (!opt.masters) return;
  const std::vector<optim::Segment>& segs = *opt.segments;
  for (size_t i = 0; i < segs.size(); ++i) {
    const optim::Segment& s = segs[i];
    if (s.numel() == 0) continue;
    const TensorPlacement& pl = placements[static_cast<size_t>(s.tensor)];
    const Tensor& t = params.tensors()[static_cast<size_t>(s.tensor)];
    float* dst = opt.masters(i);
    for (const ckpt::Box& b : ckpt::flat_range_to_boxes(t.shape, s.begin, s.end)) {
      std::vector<int64_t> off = b.offset;
      for (size_t a = 0; a < off.size(); ++a) off[a] += pl.offset[a];
      src.read(t.name, off, b.count, dst + (b.flat_begin - s.begin));
    }
  }
}

void check_replicas(comm::Communicator& comm, Slab& params, const std::string& when, const std::vector<bool>* which) {
  if (comm.size() == 1) return;
  HPCT_CHECK(params.device() == Device::CPU,
             "check_replicas ({}) hashes host memory: pass CheckpointStaging's views "
             "of device tensors",
             when);
  uint32_t crc = 0;
  if (!which) {
    crc = ckpt::crc32c(params.base(), params.bytes());
  } else {
    for (size_t i = 0; i < params.tensors().size(); ++i)
      if ((*which)[i]) crc = ckpt::crc32c(params.tensors()[i].data, params.tensors()[i].bytes(), crc);
  }
  const int64_t mine = crc;
  std::vector<int64_t> all(static_cast<size_t>(comm.size()));
  comm.allgather(&mine, all.data(), 1, DType::I64, "replica check");
  for (int r = 1; r < comm.size(); ++r)
    HPCT_CHECK(all[r] == all[0],
               "parameter replicas diverged ({}): {} rank 0 has CRC32C {:08x}, rank {} has {:08x}; data-parallel "
               "replicas must stay bitwise equal (a non-deterministic kernel or a lost gradient bucket?)",
               when, comm.name(), all[0], r, all[r]);
}

}  // namespace hpct::train
