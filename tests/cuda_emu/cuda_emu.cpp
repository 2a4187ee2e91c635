// The fiber scheduler behind cuda_emu.hpp: one block at a time, its threads as ucontext fibers on the calling OS
// thread, barriers as the only switch points. See the header for the model; the comments here say how.
#include "cuda_emu.hpp"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <map>
#include <mutex>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace cuda_emu {
namespace {

using hpct::kernels::cuda::LaunchShape;

constexpr size_t kStackBytes = 128 * 1024;  // per CUDA thread; the kernels keep a few hundred bytes of locals
constexpr unsigned kFullWarp = 0xffffffffu;

enum class State { Runnable, AtBlockBarrier, AtWarpBarrier, Done };

struct Fiber {
  ucontext_t ctx{};
  void* asan_fake_stack = nullptr;  // AddressSanitizer's record of this fiber's stack while it is switched out
  char* stack = nullptr;            // usable part (a guard page below it)
  unsigned tid = 0;                 // linear thread index in the block
  uint3 idx;
  State state = State::Runnable;
};

struct Warp {
  uint64_t generation = 0;  // completed warp barriers
  unsigned expected = 0;    // the mask of the barrier being gathered (0: none in progress)
  unsigned arrived = 0;
  const char* what = nullptr;
  uint64_t slots[2][32] = {};  // exchange values, by generation parity
  bool votes[2][32] = {};
};

// The running launch and block. Only one exists at a time (launches do not nest).
struct Run {
  const char* kernel = "";
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  unsigned threads = 0;     // per block
  unsigned exited = 0;      // threads of this block that returned
  unsigned at_barrier = 0;  // threads waiting at __syncthreads
  ucontext_t scheduler{};
  Fiber* current = nullptr;
  const std::function<void()>* body = nullptr;
  std::string error;                      // the first error raised inside a fiber
  const void* scheduler_stack = nullptr;  // the scheduler's stack, for AddressSanitizer's fiber switches
  size_t scheduler_stack_bytes = 0;
  // dynamic shared memory, exactly the launch's bytes (an AddressSanitizer build reports a read or write past them)
  std::unique_ptr<unsigned char[], void (*)(unsigned char*)> dynamic{nullptr, [](unsigned char*) {}};
  size_t dynamic_bytes = 0;
};

// Stack switches announced to AddressSanitizer (when the emulated tests are built with it, as CI builds them): it
// then checks the kernels' global and shared memory accesses, fiber stacks and all, instead of misreading a switch.
// `to_fiber` / `from_fiber` bracket each swapcontext; a fiber that will never run again passes `finished`.
#if defined(__SANITIZE_ADDRESS__)
void asan_to_fiber(Run&, Fiber& f, void** scheduler_fake) {
  __sanitizer_start_switch_fiber(scheduler_fake, f.stack, kStackBytes);
}
void asan_back_in_scheduler(void* scheduler_fake) { __sanitizer_finish_switch_fiber(scheduler_fake, nullptr, nullptr); }
void asan_from_fiber(Run& r, Fiber& f, bool finished) {
  __sanitizer_start_switch_fiber(finished ? nullptr : &f.asan_fake_stack, r.scheduler_stack, r.scheduler_stack_bytes);
}
void asan_in_fiber(Run& r, Fiber& f) {
  __sanitizer_finish_switch_fiber(f.asan_fake_stack, &r.scheduler_stack, &r.scheduler_stack_bytes);
}
#else
void asan_to_fiber(Run&, Fiber&, void**) {}
void asan_back_in_scheduler(void*) {}
void asan_from_fiber(Run&, Fiber&, bool) {}
void asan_in_fiber(Run&, Fiber&) {}
#endif

Run* g_run = nullptr;
Schedule g_schedule;
std::vector<std::pair<void*, size_t>> g_static_shared;

std::string block_name() {
  return "block (" + std::to_string(blockIdx.x) + ", " + std::to_string(blockIdx.y) + ", " +
         std::to_string(blockIdx.z) + ")";
}
std::string thread_name(const Fiber& f) {
  return "thread (" + std::to_string(f.idx.x) + ", " + std::to_string(f.idx.y) + ", " + std::to_string(f.idx.z) + ")";
}

// Unwinds a failing thread's stack to fiber_entry (its frames' destructors run), which parks the fiber for good.
struct FiberAbort {};

// Raised inside a fiber: recorded (the first error of the launch), then the thread stops.
[[noreturn]] void fail_in_fiber(const std::string& msg) {
  Run& r = *g_run;
  if (r.error.empty())
    r.error = std::string("cuda_emu: kernel ") + r.kernel + ", " + block_name() + ", " + thread_name(*r.current) +
              ": " + msg;
  throw FiberAbort{};
}

void yield_to_scheduler() {
  Run& r = *g_run;
  Fiber& f = *r.current;
  asan_from_fiber(r, f, false);
  swapcontext(&f.ctx, &r.scheduler);
  asan_in_fiber(r, *r.current);
}

// The thread's body, then the checks of a thread that returns; exceptions are caught here, on the fiber's own stack
// (unwound before the fiber parks: nothing it allocated is left behind).
void fiber_entry() {
  Run& r = *g_run;
  asan_in_fiber(r, *r.current);
  try {
    try {
      (*r.body)();
    } catch (const FiberAbort&) {
      throw;
    } catch (const std::exception& e) {
      fail_in_fiber(std::string("exception: ") + e.what());
    }
    const Fiber& f = *r.current;
    if (r.at_barrier > 0)
      fail_in_fiber("returned while " + std::to_string(r.at_barrier) +
                    " other threads wait at __syncthreads (a barrier in divergent code)");
    const Warp& w = r.warps[f.tid / 32];
    if (w.expected & (1u << (f.tid % 32)))
      fail_in_fiber(std::string("returned while lanes of its warp wait for it at ") + w.what);
    r.exited++;
  } catch (const FiberAbort&) {  // r.error says why; the scheduler throws it as an EmulationError
  }
  Fiber& f = *r.current;
  f.state = State::Done;  // never resumed
  asan_from_fiber(r, f, true);
  swapcontext(&f.ctx, &r.scheduler);
}

void poison_shared(Run& r) {
  for (auto& [p, bytes] : g_static_shared) std::memset(p, 0xff, bytes);
  if (r.dynamic_bytes > 0) std::memset(r.dynamic.get(), 0xff, r.dynamic_bytes);
}

unsigned lanes_of_warp(const Run& r, unsigned warp) {
  const unsigned first = warp * 32, n = std::min(32u, r.threads - first);
  return n == 32 ? kFullWarp : ((1u << n) - 1u);
}

// The launch checks of launch_shape.hpp, plus the kernel's own registers and static shared memory from the resource
// table the CUDA build writes (when present): name -> (registers, static shared bytes), the largest over a kernel's
// template instantiations.
struct Resources {
  int registers = 0;
  int64_t static_shared = 0;
};
const std::map<std::string, Resources>& resource_table() {
  static const std::map<std::string, Resources> table = [] {
    std::map<std::string, Resources> t;
    const char* path = std::getenv("HPCT_EMU_KERNEL_RESOURCES");
#ifdef HPCT_EMU_DEFAULT_RESOURCES
    if (path == nullptr) path = HPCT_EMU_DEFAULT_RESOURCES;
#endif
    if (path == nullptr) return t;
    std::ifstream in(path);
    std::string name;
    Resources res;
    while (in >> name >> res.registers >> res.static_shared) {
      Resources& e = t[name];
      e.registers = std::max(e.registers, res.registers);
      e.static_shared = std::max(e.static_shared, res.static_shared);
    }
    return t;
  }();
  return table;
}

// "ns::reduce_kernel<true>" -> "reduce_kernel", "(ns::kernel<true, float, 1>)" -> "kernel"
std::string base_name(const std::string& expr) {
  std::string s = expr.substr(0, expr.find('<'));
  while (!s.empty() && (s.front() == '(' || s.front() == ' ')) s.erase(0, 1);
  const size_t colon = s.rfind("::");
  if (colon != std::string::npos) s = s.substr(colon + 2);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

std::vector<unsigned> order(unsigned n, std::mt19937_64* rng) {
  std::vector<unsigned> o(n);
  std::iota(o.begin(), o.end(), 0u);
  if (rng) std::shuffle(o.begin(), o.end(), *rng);
  return o;
}

void resume(Run& r, Fiber& f) {
  r.current = &f;
  threadIdx = f.idx;
  void* scheduler_fake = nullptr;
  asan_to_fiber(r, f, &scheduler_fake);
  swapcontext(&r.scheduler, &f.ctx);
  asan_back_in_scheduler(scheduler_fake);
  r.current = nullptr;
  if (!r.error.empty()) throw EmulationError(r.error);
}

// Resumes one runnable thread, or returns false when none is. InOrder and Shuffled go in rounds (every runnable
// thread resumes once per round, in thread order or a fresh permutation); RunAhead always resumes the runnable thread
// of highest priority (a random permutation drawn per block), so some threads run as far ahead as the barriers let
// them while others lag: a write into shared memory that a lagging thread has not read yet, with no barrier in
// between, then shows.
class Scheduler {
 public:
  Scheduler(Run& r, ScheduleKind kind, std::mt19937_64* rng) : r_(r), kind_(kind), rng_(rng) {
    priority_ = order(r.threads, kind == ScheduleKind::RunAhead ? rng : nullptr);
  }
  bool step() {
    if (kind_ == ScheduleKind::RunAhead) {
      for (unsigned t : priority_)
        if (r_.fibers[t].state == State::Runnable) {
          resume(r_, r_.fibers[t]);
          return true;
        }
      return false;
    }
    bool progressed = false;
    for (unsigned t : order(r_.threads, kind_ == ScheduleKind::Shuffled ? rng_ : nullptr)) {
      if (r_.fibers[t].state != State::Runnable) continue;
      resume(r_, r_.fibers[t]);
      progressed = true;
    }
    return progressed;
  }

 private:
  Run& r_;
  ScheduleKind kind_;
  std::mt19937_64* rng_;
  std::vector<unsigned> priority_;
};

// A fresh context for the thread, entering fiber_entry on its stack at the first resume.
void start_fiber(Fiber& f) {
  f.state = State::Runnable;
  f.asan_fake_stack = nullptr;
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack;
  f.ctx.uc_stack.ss_size = kStackBytes;
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, fiber_entry, 0);
}

void run_block(Run& r, std::mt19937_64* rng) {
  poison_shared(r);
  r.exited = 0;
  r.at_barrier = 0;
  for (Warp& w : r.warps) w = Warp{};
  for (Fiber& f : r.fibers) start_fiber(f);
  Scheduler scheduler(r, g_schedule.kind, rng);
  while (r.exited < r.threads) {
    if (!scheduler.step()) {
      std::ostringstream os;
      os << "cuda_emu: kernel " << r.kernel << ", " << block_name() << ": deadlock: " << r.at_barrier
         << " threads wait at __syncthreads, " << r.exited << " have returned";
      for (size_t w = 0; w < r.warps.size(); w++)
        if (r.warps[w].expected)
          os << "; warp " << w << " waits at " << r.warps[w].what << " for lanes 0x" << std::hex
             << (r.warps[w].expected & ~r.warps[w].arrived) << std::dec;
      throw EmulationError(os.str());
    }
  }
}

// A kernel that never reaches a barrier or its end cannot be preempted (its fibers share one OS thread), as a GPU
// kernel stuck in an endless loop hangs the device: a watchdog thread ends the test process with a message naming
// the kernel and the block after HPCT_EMU_WATCHDOG_S seconds (default 300) of one launch.
class Watchdog {
 public:
  explicit Watchdog(const char* kernel) : kernel_(kernel) {
    const char* env = std::getenv("HPCT_EMU_WATCHDOG_S");
    const double seconds = env ? std::atof(env) : 300.0;
    if (seconds <= 0) return;
    thread_ = std::thread([this, seconds] {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return done_; })) return;
      std::fprintf(stderr,
                   "cuda_emu: kernel %s has run for %.0f s (last block started: %ld): an endless loop in the kernel? "
                   "(HPCT_EMU_WATCHDOG_S sets the limit)\n",
                   kernel_, seconds, static_cast<long>(block_.load()));
      std::fflush(stderr);
      std::_Exit(124);
    });
  }
  ~Watchdog() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  void block_started(int64_t linear_block) { block_.store(linear_block); }

 private:
  const char* kernel_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::atomic<int64_t> block_{-1};
  std::thread thread_;
};

struct StackPool {
  char* base = nullptr;
  size_t bytes = 0;
  ~StackPool() {
    if (base) munmap(base, bytes);
  }
};

}  // namespace

Schedule set_schedule(Schedule schedule) {
  const Schedule previous = g_schedule;
  g_schedule = schedule;
  return previous;
}

bool track_static_shared(void* p, size_t bytes) {
  g_static_shared.emplace_back(p, bytes);
  std::memset(p, 0xff, bytes);  // registered by its first use, inside a block: poisoned now
  return true;
}

void* dynamic_shared() {
  if (g_run == nullptr) throw EmulationError("cuda_emu: dynamic shared memory used outside a launch");
  return g_run->dynamic.get();
}

void launch(const char* name, const LaunchShape& shape, const std::function<void()>& body) {
  if (g_run != nullptr) throw EmulationError(std::string("cuda_emu: launch of ") + name + " inside a kernel");
  const std::string base = base_name(name);
  // the device's verdict on the launch, before running anything
  const auto& table = resource_table();
  const auto it = table.find(base);
  const Resources res = it == table.end() ? Resources{} : it->second;
  const std::string problem = hpct::kernels::cuda::launch_problem(shape, hpct::kernels::cuda::kH100Limits,
                                                                  res.static_shared, res.registers);
  if (!problem.empty())
    throw EmulationError(std::string("cuda_emu: kernel ") + name + ": an H100 would refuse this launch: " + problem);

  Run r;
  r.kernel = name;
  r.body = &body;
  r.threads = static_cast<unsigned>(shape.block.count());
  r.warps.resize((r.threads + 31) / 32);
  if (shape.shared_bytes > 0) {
    r.dynamic_bytes = static_cast<size_t>(shape.shared_bytes);
    r.dynamic = {static_cast<unsigned char*>(::operator new[](r.dynamic_bytes, std::align_val_t{16})),
                 [](unsigned char* p) { ::operator delete[](p, std::align_val_t{16}); }};
  }

  // stacks, each above a guard page (an overflow faults instead of corrupting a neighbour)
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t slot = kStackBytes + page;
  StackPool pool;
  pool.bytes = slot * r.threads;
  void* mem = mmap(nullptr, pool.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) throw EmulationError("cuda_emu: cannot map the thread stacks");
  pool.base = static_cast<char*>(mem);
  r.fibers.resize(r.threads);
  for (unsigned t = 0; t < r.threads; t++) {
    Fiber& f = r.fibers[t];
    char* s = pool.base + t * slot;
    mprotect(s, page, PROT_NONE);
    f.stack = s + page;
    f.tid = t;
    f.idx = uint3(t % shape.block.x, (t / shape.block.x) % shape.block.y, t / (shape.block.x * shape.block.y));
  }

  blockDim = dim3(shape.block.x, shape.block.y, shape.block.z);
  gridDim = dim3(shape.grid.x, shape.grid.y, shape.grid.z);
  const int64_t blocks = shape.grid.count();
  std::unique_ptr<std::mt19937_64> rng;
  if (g_schedule.kind != ScheduleKind::InOrder) rng = std::make_unique<std::mt19937_64>(g_schedule.seed);
  std::vector<int64_t> block_order(static_cast<size_t>(blocks));
  std::iota(block_order.begin(), block_order.end(), int64_t{0});
  if (rng) std::shuffle(block_order.begin(), block_order.end(), *rng);

  g_run = &r;
  Watchdog watchdog(name);
  try {
    for (int64_t b : block_order) {
      watchdog.block_started(b);
      blockIdx = uint3(static_cast<unsigned>(b % shape.grid.x),
                       static_cast<unsigned>((b / shape.grid.x) % shape.grid.y),
                       static_cast<unsigned>(b / (int64_t{shape.grid.x} * shape.grid.y)));
      run_block(r, rng.get());
    }
  } catch (...) {
    g_run = nullptr;
    throw;
  }
  g_run = nullptr;
}

void syncthreads() {
  Run& r = *g_run;
  if (r.exited > 0)
    fail_in_fiber("__syncthreads after " + std::to_string(r.exited) +
                  " threads of the block returned (a barrier in divergent code)");
  r.current->state = State::AtBlockBarrier;
  if (++r.at_barrier == r.threads) {  // the last one in releases the block
    r.at_barrier = 0;
    for (Fiber& f : r.fibers)
      if (f.state == State::AtBlockBarrier) f.state = State::Runnable;
  }
  yield_to_scheduler();
}

namespace {
// Arrive at the warp barrier of `mask`; returns the generation whose slots this barrier exchanges (read them after
// this returns, before the next warp barrier).
uint64_t warp_barrier(unsigned mask, const char* what, uint64_t bits, bool vote) {
  Run& r = *g_run;
  Fiber& f = *r.current;
  const unsigned warp = f.tid / 32, lane = f.tid % 32;
  Warp& w = r.warps[warp];
  const unsigned lanes = lanes_of_warp(r, warp);
  if (!(mask & (1u << lane))) fail_in_fiber(std::string(what) + " with a mask that does not name the calling lane");
  if (mask & ~lanes) fail_in_fiber(std::string(what) + " with a mask naming lanes beyond the block");
  if (w.expected == 0) {
    w.expected = mask;
    w.arrived = 0;
    w.what = what;
  } else if (w.expected != mask) {
    fail_in_fiber(std::string(what) + ": the lanes of the warp disagree on the mask (" + std::to_string(w.expected) +
                  " vs " + std::to_string(mask) + ")");
  }
  for (unsigned l = 0; l < 32; l++) {
    const unsigned t = warp * 32 + l;
    if ((mask & (1u << l)) && t < r.threads && r.fibers[t].state == State::Done)
      fail_in_fiber(std::string(what) + ": the mask names lane " + std::to_string(l) + ", which has returned");
  }
  const uint64_t gen = w.generation;
  w.slots[gen % 2][lane] = bits;
  w.votes[gen % 2][lane] = vote;
  w.arrived |= 1u << lane;
  f.state = State::AtWarpBarrier;
  if (w.arrived == w.expected) {
    w.generation++;
    w.expected = 0;
    for (unsigned l = 0; l < 32; l++) {
      const unsigned t = warp * 32 + l;
      if ((mask & (1u << l)) && t < r.threads) r.fibers[t].state = State::Runnable;
    }
  }
  yield_to_scheduler();
  return gen;
}
}  // namespace

void syncwarp(unsigned mask) { warp_barrier(mask, "__syncwarp", 0, false); }

uint64_t warp_exchange(unsigned mask, uint64_t bits, int src_lane, const char* what) {
  const uint64_t gen = warp_barrier(mask, what, bits, false);
  Run& r = *g_run;
  if (src_lane < 0 || src_lane >= 32 || !(mask & (1u << src_lane)))
    fail_in_fiber(std::string(what) + " reads lane " + std::to_string(src_lane) + ", which the mask does not name");
  return r.warps[r.current->tid / 32].slots[gen % 2][src_lane];
}

unsigned warp_ballot(unsigned mask, bool pred) {
  const uint64_t gen = warp_barrier(mask, "__ballot_sync", 0, pred);
  const Warp& w = g_run->warps[g_run->current->tid / 32];
  unsigned b = 0;
  for (unsigned l = 0; l < 32; l++)
    if ((mask & (1u << l)) && w.votes[gen % 2][l]) b |= 1u << l;
  return b;
}

// ---- 16-bit formats ------------------------------------------------------------------------------------------------
namespace {
// Round x to a binary format with `mant` fraction bits, minimum normal exponent emin and largest finite value
// max_finite, round to nearest even; returns the value (as a double) or +-inf.
double round_to_format(double x, int mant, int emin, double max_finite) {
  if (x == 0.0 || !std::isfinite(x)) return x;
  const int e = std::max(std::ilogb(x), emin);
  const double quantum = std::ldexp(1.0, e - mant);
  const double r = std::nearbyint(x / quantum) * quantum;  // the default rounding mode: ties to even
  if (std::fabs(r) > max_finite) return std::copysign(INFINITY, x);
  return r;
}
}  // namespace

uint16_t bf16_bits_from(double x) {
  if (std::isnan(x)) return 0x7fff;
  const double r = round_to_format(x, 7, -126, 3.3895313892515355e38);  // (2 - 2^-7) 2^127
  const float f = static_cast<float>(r);                                // exact: bf16 values are floats
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

float bf16_to_float(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t half_bits_from(double x) {
  if (std::isnan(x)) return 0x7fff;
  const double r = round_to_format(x, 10, -14, 65504.0);
  const uint16_t sign = std::signbit(r) ? 0x8000 : 0;
  const double a = std::fabs(r);
  if (std::isinf(a)) return sign | 0x7c00;
  if (a == 0.0) return sign;
  if (a < std::ldexp(1.0, -14))  // subnormal: a multiple of 2^-24
    return sign | static_cast<uint16_t>(std::ldexp(a, 24));
  const int e = std::ilogb(a);
  const uint16_t frac = static_cast<uint16_t>(std::ldexp(a, 10 - e) - 1024.0);
  return sign | static_cast<uint16_t>((e + 15) << 10) | frac;
}

float half_to_float(uint16_t bits) {
  const int sign = bits & 0x8000 ? -1 : 1;
  const int exp = (bits >> 10) & 0x1f, frac = bits & 0x3ff;
  if (exp == 0x1f) return frac ? NAN : sign * INFINITY;
  if (exp == 0) return static_cast<float>(sign * std::ldexp(frac, -24));
  return static_cast<float>(sign * std::ldexp(1024 + frac, exp - 25));
}

float exp2_rn(float x) { return static_cast<float>(std::exp2(static_cast<double>(x))); }
float log2_rn(float x) { return static_cast<float>(std::log2(static_cast<double>(x))); }

}  // namespace cuda_emu

// ---- tensor cores: mma.sync m16n8k16 and ldmatrix (the model: cuda_emu.hpp) ----------------------------------------
namespace cuda_emu {
namespace {

// What a lane deposits at a tensor-core collective: its operand registers, which collective it is at and the warp
// barrier's generation (lanes at different collectives, or one at a shuffle, must not meet here unnoticed).
struct LaneOperands {
  uint64_t generation = 0;
  int op = 0;
  uint32_t words[6] = {};  // mma: a[0..3], b[0..1]; ldmatrix: the 16 bytes of the lane's row
};
// Per warp and generation parity, as Warp::slots: a lane reads the deposits of generation g after the barrier and
// before it arrives at the next one, and nobody writes g's parity again before every lane has arrived there.
struct WarpOperands {
  LaneOperands lanes[2][32];
};
std::vector<WarpOperands> g_operands;

// Deposits the calling lane's operands at a barrier over its full warp; returns the 32 lanes' deposits.
const LaneOperands* warp_gather(LaneOperands mine, const char* what) {
  Run& r = *g_run;
  const unsigned warp = r.current->tid / 32, lane = r.current->tid % 32;
  if (r.threads < (warp + 1) * 32)
    fail_in_fiber(std::string(what) + " in a warp of fewer than 32 threads (the block size is not a multiple of 32)");
  if (g_operands.size() < r.warps.size()) g_operands.resize(r.warps.size());
  const uint64_t gen = r.warps[warp].generation;  // the barrier this lane arrives at (no switch before it does)
  mine.generation = gen;
  g_operands[warp].lanes[gen % 2][lane] = mine;
  // every lane at this barrier writes its exchange slot: at a tensor-core collective the collective's tag, at a
  // shuffle its value (a lane elsewhere cannot pass for one here, however old the operand deposits are)
  const uint64_t tag = 0x7e450c0de0000000ull | static_cast<uint64_t>(mine.op);
  warp_barrier(kFullWarp, what, tag, false);
  const LaneOperands* all = g_operands[warp].lanes[gen % 2];
  for (unsigned l = 0; l < 32; l++)
    if (r.warps[warp].slots[gen % 2][l] != tag || all[l].generation != gen || all[l].op != mine.op)
      fail_in_fiber(std::string(what) + ": lane " + std::to_string(l) +
                    " of the warp is at another warp collective (every lane must execute the same .sync.aligned "
                    "instruction)");
  return all;
}

uint16_t half_word(uint32_t w, int upper) { return static_cast<uint16_t>(upper ? w >> 16 : w & 0xffffu); }

}  // namespace

void mma_m16n8k16(MmaInput input, float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
  LaneOperands mine;
  mine.op = input == MmaInput::BF16 ? 1 : 2;
  for (int i = 0; i < 4; i++) mine.words[i] = a[i];
  mine.words[4] = b[0];
  mine.words[5] = b[1];
  const float c_in[4] = {c[0], c[1], c[2], c[3]};  // d may be c
  const LaneOperands* all = warp_gather(mine, input == MmaInput::BF16 ? "mma.sync.m16n8k16 (bf16)"
                                                                      : "mma.sync.m16n8k16 (f16)");
  auto widen = [input](uint16_t bits) {
    return static_cast<double>(input == MmaInput::BF16 ? bf16_to_float(bits) : half_to_float(bits));
  };
  // A (row, k): lane (row % 8) * 4 + (k % 8) / 2, register (row >= 8) + 2 (k >= 8), half k % 2
  auto A = [&](int row, int k) {
    const LaneOperands& o = all[static_cast<size_t>((row % 8) * 4 + (k % 8) / 2)];
    return widen(half_word(o.words[(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k % 2));
  };
  // B (k, n): lane n * 4 + (k % 8) / 2, register k >= 8, half k % 2
  auto B = [&](int k, int n) {
    const LaneOperands& o = all[static_cast<size_t>(n * 4 + (k % 8) / 2)];
    return widen(half_word(o.words[4 + (k >= 8 ? 1 : 0)], k % 2));
  };
  const int lane = static_cast<int>(g_run->current->tid % 32), g = lane >> 2, t = lane % 4;
  for (int i = 0; i < 4; i++) {
    const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i % 2);
    double s = c_in[i];
    for (int k = 0; k < 16; k++) s += A(row, k) * B(k, col);
    d[i] = static_cast<float>(s);
  }
}

void ldmatrix(int matrices, bool trans, uint32_t* r, const void* row_address) {
  if (matrices != 1 && matrices != 2 && matrices != 4)
    fail_in_fiber("ldmatrix of " + std::to_string(matrices) + " matrices (.x1, .x2 or .x4)");
  LaneOperands mine;
  mine.op = 16 + 2 * matrices + (trans ? 1 : 0);
  const int lane = static_cast<int>(g_run->current->tid % 32);
  if (lane < 8 * matrices) {  // an addressing lane: its row, read now (the other lanes' addresses are ignored)
    if (reinterpret_cast<uintptr_t>(row_address) % 16 != 0)
      fail_in_fiber("ldmatrix: lane " + std::to_string(lane) + "'s row address is not 16-byte aligned");
    std::memcpy(mine.words, row_address, 16);
  }
  const LaneOperands* all = warp_gather(mine, trans ? "ldmatrix.trans" : "ldmatrix");
  // element c (0..7) of row `row` of matrix i: the row's depositor 8i + row, 16-bit half c of its row
  auto element = [&](int i, int row, int c) {
    return half_word(all[static_cast<size_t>(8 * i + row)].words[c / 2], c % 2);
  };
  for (int i = 0; i < matrices; i++) {
    if (!trans) {
      r[i] = all[static_cast<size_t>(8 * i + lane / 4)].words[lane % 4];
    } else {
      const int row = 2 * (lane % 4), col = lane / 4;
      r[i] = static_cast<uint32_t>(element(i, row, col)) | (static_cast<uint32_t>(element(i, row + 1, col)) << 16);
    }
  }
}

}  // namespace cuda_emu
