#!/usr/bin/python3
"""Static care of the GPU code (ctest label `static`): reads the C++/CUDA sources, compiles nothing, needs no GPU.

  calls     every call of a CUDA runtime (cuda[A-Z]...), cuBLAS (cublas[A-Z]...), cuDNN (cudnn[A-Z]...) or NCCL
            (nccl[A-Z]...) function must have its status checked: the call is the argument of a status-checking macro
            (every `#define NAME(expr)` of the tree that stores `(expr)` in a cudaError_t / cublasStatus_t /
            cudnnStatus_t / ncclResult_t and compares it: CUDA_CHECK, CUBLAS_CHECK, CUDNN_CHECK, NCCL_CHECK), or of a
            GoogleTest EQ / NE assertion, or of a status predicate (PREDICATES); or it is compared (== / !=) in place;
            or returned to the caller (who checks it); or assigned to a variable that the enclosing function compares,
            checks or returns. Anything else (a discarded result, a (void) cast, a use as a truth value) is reported,
            unless ALLOW below lists it, with its reason. Functions that return no status (STATUSLESS: the error-string
            functions, cudnnGetVersion) and type names (cudaStream_t) are not calls to check.
  pairs     every stream, event, cuBLAS / cuDNN handle or descriptor, NCCL communicator and device or pinned
            allocation that is created has a matching destroy (FAMILIES): in a method of the same class when a class
            creates it (its owner is reported), in the same function for a local, or, for a handle a function
            returns, in the same file (the matching release function); NCCL communicators must be destroyed or
            aborted. Exceptions: KEEP_FOREVER, with reasons.

Scans lib/, apps/, tests/ (*.cpp *.hpp *.h *.cu *.cuh) and validation/*.cpp of the repository (or the files/folders
given). Prints the findings, the owners of every created resource (--verbose), and VALID: cuda calls, or FAILED: ...
(exit 1). --self-test runs the checker on synthetic sources with known defects and fails unless it finds exactly
those (ctest static_cuda_calls_selftest).

usage: check_cuda_calls.py [--verbose] [PATH...]      check_cuda_calls.py --self-test
"""
import bisect
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTS = (".cpp", ".hpp", ".h", ".cu", ".cuh")
CALL = re.compile(r"\b((?:cuda|cublas|cudnn|nccl)[A-Z]\w*)\s*\(")
STATUS_TYPES = ("cudaError_t", "cublasStatus_t", "cudnnStatus_t", "ncclResult_t")
GTEST_COMPARE = {"EXPECT_EQ", "ASSERT_EQ", "EXPECT_NE", "ASSERT_NE"}
PREDICATES = {"nccl_accepted": "lib/comm/nccl_communicator.cpp: ncclSuccess or ncclInProgress (non-blocking NCCL)"}
STATUSLESS = {"cudaGetErrorString", "cudaGetErrorName", "cublasGetStatusString", "cublasGetStatusName",
              "cudnnGetErrorString", "ncclGetErrorString", "ncclGetLastError",
              "cudnnGetVersion"}  # returns the library's version number
# The allow-list: (call, where, reason). where = "anywhere", or "teardown": a destructor, a catch block, or one of
# TEARDOWN_FUNCTIONS. A discarded result is accepted only when an entry matches.
ALLOW = [
    ("cudaGetLastError", "anywhere",
     "clears the error state a failed call left behind; the error itself was handled where it was returned"),
    ("ncclCommAbort", "anywhere",
     "only called on the way to an error (or from teardown): nothing is left to do with its own result"),
    (r"cudaFree|cudaFreeHost|cudaFreeAsync|cudaStreamDestroy|cudaEventDestroy|cublasDestroy|cudnnDestroy\w*|"
     r"ncclCommDestroy", "teardown",
     "release at teardown: a destructor must not throw, a catch block is already handling the error that matters, "
     "and a failing release leaves nothing to do"),
]
TEARDOWN_FUNCTIONS = {
    "device_free": "lib/tensor/device.cpp: the release half of device_alloc, called from Slab's destructor",
}
# created by -> destroyed by
FAMILIES = [
    (r"cudaStreamCreate\w*", r"cudaStreamDestroy", "stream"),
    (r"cudaEventCreate\w*", r"cudaEventDestroy", "event"),
    (r"cudaMalloc|cudaMallocManaged|cudaMallocPitch", r"cudaFree", "device memory"),
    (r"cudaMallocAsync|cudaMallocFromPoolAsync", r"cudaFreeAsync|cudaFree", "stream-ordered device memory"),
    (r"cudaMallocHost|cudaHostAlloc", r"cudaFreeHost", "pinned host memory"),
    (r"cublasCreate", r"cublasDestroy", "cuBLAS handle"),
    (r"cublasLtCreate", r"cublasLtDestroy", "cuBLASLt handle"),
    (r"cudnnCreate", r"cudnnDestroy", "cuDNN handle"),
    (r"cudnnCreate(\w+)Descriptor", r"cudnnDestroy{1}Descriptor", "cuDNN descriptor"),
    (r"ncclCommInit\w*|ncclCommSplit", r"ncclCommDestroy|ncclCommAbort", "NCCL communicator"),
    (r"cudaGraphCreate", r"cudaGraphDestroy", "CUDA graph"),
    (r"cudaGraphInstantiate\w*", r"cudaGraphExecDestroy", "CUDA graph executable"),
]
# (file suffix, create regex, reason): created and deliberately never destroyed
KEEP_FOREVER = [
    ("lib/kernels/cuda/cuda_gpt.cu", r"cublasCreate",
     "one cuBLAS handle per device for the process's lifetime: destroying it from a static destructor can run after "
     "the CUDA runtime is torn down (cuda_gpt.cu, cublas_handle)"),
    ("lib/kernels/cuda/cuda_core.cu", r"cudaMalloc",
     "the device-wide buffers (cuda_core.cu, device_lifetime_buffer: the cuBLASLt workspace, allocated at the first "
     "bf16 GEMM, and the reduction partials, at the first column reduction; never in the step loop's steady state) "
     "live as long as the process, like the cuBLAS handle: a static destructor's cudaFree could run after the CUDA "
     "runtime is torn down"),
    ("lib/kernels/cuda/cuda_resnet.cu", r"cudnnCreate\w*",
     "per-thread cuDNN handles and per-shape descriptor caches, never destroyed for the same reason (the header "
     "comment of cuda_resnet.cu; PyTorch leaks its handles likewise)"),
    ("lib/kernels/cuda/cuda_cudnn.cpp", r"cudnnCreate",
     "the per-thread, per-device cuDNN handle the convolutions and the fused attention share, never destroyed for the "
     "same reason (cuda_cudnn.hpp)"),
]
CONTROL = {"if", "for", "while", "switch", "catch", "do", "else", "try", "return", "sizeof", "decltype"}
NOT_TYPE = {"return", "else", "case", "throw", "co_return", "co_await", "do", "new", "delete"}


# ---------------------------------------------------------------- reading C++ ----

def strip_code(text):
    """Comments and string / character literals blanked (newlines kept), so that offsets and lines stay valid."""
    out = list(text)
    i, n = 0, len(text)

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            blank(i + 1, j)
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and (text[i - 1].isalnum()):  # a digit separator (1'000)
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            blank(i + 1, min(j, n))
            i = j + 1
        else:
            i += 1
    code = "".join(out)
    # preprocessor lines other than #define (#if, #endif, #include, ...) are no code: blanked, so that the token before a
    # call on the next line is not taken for a return type (#define bodies stay: checking macros live there)
    return re.sub(r"(?m)^[ \t]*#[ \t]*(?!define\b)\w*[^\n]*", lambda m: " " * len(m.group(0)), code)


def match_paren(code, open_pos):
    """The offset just past the parenthesis that closes the one at open_pos (len(code) when unbalanced)."""
    depth = 0
    for k in range(open_pos, len(code)):
        ch = code[k]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return k + 1
    return len(code)


def prev_token(code, pos):
    """(token, start) of the token before pos: an identifier, or one or two punctuation characters."""
    k = pos - 1
    while k >= 0 and code[k].isspace():
        k -= 1
    if k < 0:
        return "", 0
    if code[k].isalnum() or code[k] == "_":
        j = k
        while j >= 0 and (code[j].isalnum() or code[j] == "_"):
            j -= 1
        return code[j + 1:k + 1], j + 1
    if k >= 1 and code[k - 1:k + 1] in ("==", "!=", "<=", ">=", "::", "&&", "||", "->"):
        return code[k - 1:k + 1], k - 1
    return code[k], k


def next_token(code, pos):
    k = pos
    while k < len(code) and code[k].isspace():
        k += 1
    return code[k:k + 2] if code[k:k + 2] in ("==", "!=") else code[k:k + 1], k


class Block:
    __slots__ = ("open", "close", "head", "kind", "name", "owner")

    def __init__(self, open_pos, head):
        self.open, self.close, self.head = open_pos, None, head
        self.kind, self.name, self.owner = classify_head(head)


def classify_head(head):
    """(kind, name, owner class) of the block a `{` opens, from the text before it."""
    h = re.sub(r"\s+", " ", head).strip()
    h = re.sub(r"^(?:#.*? )?(?:template ?<[^{;]*?> ?)", "", h)
    m = re.match(r"^(?:typedef )?(?:class|struct|union)(?: alignas\([^)]*\))? (\w+)", h)
    if m:
        return "class", m.group(1), m.group(1)
    if re.match(r"^(?:inline )?namespace\b|^extern \"|^enum\b", h) or h.endswith("=") or h == "":
        return "scope", "", None
    if h.startswith("["):
        return "lambda", "", None
    word = re.match(r"^\}? ?(\w+)", h)
    if word and word.group(1) in CONTROL:
        return ("catch" if word.group(1) == "catch" else "control"), word.group(1), None
    depth, first = 0, -1
    for k, ch in enumerate(h):
        if ch == "(" and depth == 0 and first < 0:
            first = k
        depth += ch == "("
        depth -= ch == ")"
    if first < 0:
        return "scope", "", None  # an initialiser list, a bare block
    m = re.search(r"(~?[\w:~]+) ?$", h[:first])
    if not m:
        return "scope", "", None
    name = m.group(1)
    owner = name.rsplit("::", 1)[0].split("::")[-1] if "::" in name else None
    short = name.split("::")[-1]
    if short == "TEST" or short.startswith("TEST_"):  # GoogleTest: TEST(Suite, Name)
        close = h.find(")", first)
        name = f"{short}({h[first + 1:close]})"
    if short in CONTROL:
        return "control", short, None
    return ("destructor" if short.startswith("~") else "function"), name, owner


class Source:
    def __init__(self, path, rel):
        self.path, self.rel = path, rel
        with open(path, encoding="utf-8", errors="replace") as f:
            self.text = f.read()
        self.code = strip_code(self.text)
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", self.text)]
        self.blocks = []
        stack, last_stop = [], 0
        for k, ch in enumerate(self.code):
            if ch == "{":
                b = Block(k, self.code[last_stop:k])
                stack.append(b)
                self.blocks.append(b)
                last_stop = k + 1
            elif ch == "}":
                if stack:
                    stack.pop().close = k
                last_stop = k + 1
            elif ch == ";":
                last_stop = k + 1
            elif ch == "\n" and self.code[last_stop:k].lstrip().startswith("#") and not self.code[k - 1] == "\\":
                last_stop = k + 1  # a preprocessor line ends there
        for b in stack:
            b.close = len(self.code)

    def line(self, pos):
        return bisect.bisect_right(self.line_starts, pos)

    def enclosing(self, pos):
        """The blocks around pos, outermost first."""
        return [b for b in self.blocks if b.open < pos < b.close]

    def function_of(self, pos):
        """(label, owner class, body block) of the function around pos (lambdas belong to their function)."""
        blocks = self.enclosing(pos)
        cls = None
        for b in blocks:
            if b.kind == "class":
                cls = b.name
            if b.kind in ("function", "destructor"):
                owner = b.owner or cls
                label = b.name if "::" in b.name or not owner or b.name.startswith("TEST") else f"{owner}::{b.name}"
                return label, owner, b
        return None, cls, None


# ---------------------------------------------------------------- the checks ----

def find_check_macros(sources):
    """Names of the status-checking macros: #define NAME(x) storing (x) in a status type and comparing it."""
    names = set()
    for s in sources:
        for m in re.finditer(r"#define[ \t]+(\w+)\((\w+)\)((?:[^\n]*\\\n)*[^\n]*)", s.code):
            body = m.group(3)
            if re.search(r"(%s)\s+\w+\s*=\s*\(\s*%s\s*\)" % ("|".join(STATUS_TYPES), m.group(2)), body) and \
                    re.search(r"!=|==", body):
                names.add(m.group(1))
    return names


def call_sites(src):
    """(name, start, open paren, end) of every call (not a declaration) of the four APIs."""
    for m in CALL.finditer(src.code):
        name = m.group(1)
        if name.endswith("_t") or name in STATUSLESS:
            continue
        tok, _ = prev_token(src.code, m.start())
        if re.match(r"^\w+$", tok) and tok not in NOT_TYPE:  # `cudaError_t cudaFoo(` declares a function
            continue
        if tok in ("*", "&") and re.match(r"^\w+$", prev_token(src.code, prev_token(src.code, m.start())[1])[0]):
            continue
        yield name, m.start(), m.end() - 1, match_paren(src.code, m.end() - 1)


def inside_args(src, pos, names):
    """The macro / function of `names` whose argument list contains pos, if any."""
    for m in re.finditer(r"\b(%s)\s*\(" % "|".join(map(re.escape, sorted(names))), src.code):
        if m.end() - 1 < pos < match_paren(src.code, m.end() - 1):
            return m.group(1)
    return None


def is_teardown(src, pos):
    for b in src.enclosing(pos):
        if b.kind in ("destructor", "catch"):
            return b.kind
        if b.kind == "function" and b.name.split("::")[-1] in TEARDOWN_FUNCTIONS:
            return b.name
    return None


def allowed(name, where_teardown):
    for pattern, where, reason in ALLOW:
        if re.fullmatch(pattern, name) and (where == "anywhere" or where_teardown):
            return reason
    return None


def check_calls(src, macros, findings):
    for name, start, open_paren, end in call_sites(src):
        line = src.line(start)
        where = f"{src.rel}:{line}"
        if inside_args(src, start, macros | GTEST_COMPARE | set(PREDICATES)):
            continue
        before, bpos = prev_token(src.code, start)
        after, _ = next_token(src.code, end)
        if before in ("==", "!=") or after in ("==", "!="):
            continue
        if before == "return":
            continue
        if before == "=":  # assigned: the enclosing function must compare, check or return the variable
            lhs = re.search(r"([\w.\->\[\]]+)\s*$", src.code[:bpos])
            var = lhs.group(1) if lhs else ""
            _, _, body = src.function_of(start)
            lo, hi = (body.open, body.close) if body else (0, len(src.code))
            scope = src.code[lo:start] + src.code[end:hi]
            v = re.escape(var)
            uses = [r"\b%s\s*[!=]=" % v, r"[!=]=\s*%s\b" % v, r"\breturn\b[^;]*\b%s\b" % v,
                    r"\b(?:%s)\s*\(\s*%s\s*\)" % ("|".join(sorted(macros | set(PREDICATES))), v),
                    r"\b(?:%s)\s*\(\s*%s\s*," % ("|".join(sorted(GTEST_COMPARE)), v)]
            if var and any(re.search(u, scope) for u in uses):
                continue
            findings.append((where, name, f"assigned to `{var}`, which the function never compares or checks"))
            continue
        statement = after == ";" and (before in (";", "{", "}", ")", ":", "else") or before == "")
        voided = before == ")" and re.search(r"\(\s*void\s*\)\s*$", src.code[:start])
        if statement or voided:
            td = is_teardown(src, start)
            if allowed(name, td):
                continue
            how = "discarded with (void)" if voided else "its result is ignored"
            ctx = f" (in {td})" if td else ""
            findings.append((where, name, f"{how}{ctx}: not on the allow-list"))
            continue
        findings.append((where, name, "its status is used in an expression without a comparison"))


def check_pairs(sources, findings, owners):
    by_stem = {}
    for s in sources:
        by_stem.setdefault(os.path.splitext(s.path)[0], []).append(s)
    for s in sources:
        siblings = by_stem[os.path.splitext(s.path)[0]]
        for name, start, open_paren, end in call_sites(s):
            fam = None
            for create, destroy, what in FAMILIES:
                m = re.fullmatch(create, name)
                if m:
                    fam = (destroy.replace("{1}", m.group(1)) if m.groups() else destroy, what)
            if not fam:
                continue
            destroy, what = fam
            where = f"{s.rel}:{s.line(start)}"
            keep = [r for suffix, pat, r in KEEP_FOREVER if s.rel.endswith(suffix) and re.fullmatch(pat, name)]
            if keep:
                owners.append(f"{where} {name}: {what} kept for the process's lifetime ({keep[0]})")
                continue
            arg = s.code[open_paren + 1:end - 1].split(",")[0].strip()
            handle = re.sub(r"^\(?\s*(?:\([^)]*\)\s*)?&?\s*", "", arg).strip()  # &x, (void**)&x -> x
            label, owner, body = s.function_of(start)
            destroys = []  # (source, position, function label, owner)
            for t in (siblings if owner else [s]):
                for dname, dstart, dopen, dend in call_sites(t):
                    if re.fullmatch(destroy, dname):
                        dl, do, _ = t.function_of(dstart)
                        destroys.append((t, dstart, dl, do, t.code[dopen + 1:dend - 1]))
            if owner:
                mine = sorted({d[2] for d in destroys if d[3] == owner})
                if mine:
                    owners.append(f"{where} {name}({arg}): {what} owned by class {owner}, created in {label}, "
                                  f"destroyed in {', '.join(mine)}")
                    continue
                findings.append((where, name, f"{what} created by class {owner} ({label}) but no {destroy} in "
                                 f"any method of {owner}"))
                continue
            local = [d for d in destroys if body and body.open < d[1] < body.close and
                     re.search(r"\b%s\b" % re.escape(handle), d[4])]
            if local:
                owners.append(f"{where} {name}({arg}): {what} local to {label}, destroyed there")
                continue
            returned = body and re.search(r"\breturn\s+(?:static_cast<[^>]*>\()?\s*%s\b" % re.escape(handle),
                                          s.code[start:body.close])
            if returned and destroys:
                owners.append(f"{where} {name}({arg}): {what} returned by {label}; released by "
                              f"{', '.join(sorted({d[2] or '?' for d in destroys}))} in the same file")
                continue
            findings.append((where, name, f"{what} created in {label or 'file scope'} without a matching "
                             f"{destroy} of `{handle}` there"))


def collect(paths):
    files = []
    for p in paths:
        if os.path.isfile(p):
            files.append(p)
            continue
        for d, _, names in os.walk(p):
            for n in names:
                if n.endswith(EXTS):
                    files.append(os.path.join(d, n))
    return sorted(set(files))


def default_paths(root):
    paths = [os.path.join(root, d) for d in ("lib", "apps", "tests")]
    vdir = os.path.join(root, "validation")
    if os.path.isdir(vdir):
        paths += [os.path.join(vdir, f) for f in os.listdir(vdir) if f.endswith(".cpp")]
    return [p for p in paths if os.path.exists(p)]


def run_checks(paths, root):
    sources = [Source(f, os.path.relpath(f, root)) for f in collect(paths)]
    macros = find_check_macros(sources)
    calls, pairs, owners = [], [], []
    for s in sources:
        check_calls(s, macros, calls)
    check_pairs(sources, pairs, owners)
    n_calls = sum(1 for s in sources for _ in call_sites(s))
    return sources, macros, calls, pairs, owners, n_calls


# ---------------------------------------------------------------- self-test ----

SELFTEST = {
    "check.hpp": r"""
#define MY_CHECK(expr)                       \
  do {                                       \
    cudaError_t my_rc_ = (expr);             \
    if (my_rc_ != cudaSuccess) throw 1;      \
  } while (0)
""",
    "bad.cu": r"""#include "check.hpp"
void unchecked(float* p, cudaStream_t s) {
  cudaMemset(p, 0, 4);                                   // BAD 3
  (void)cudaMemcpy(p, p, 4, cudaMemcpyDeviceToDevice);   // BAD 4
  cudaError_t rc = cudaStreamSynchronize(s);             // BAD 5
  use(rc);
  if (cudaDeviceSynchronize()) return;                   // BAD 7
  MY_CHECK(cudaMalloc(&p, 4));                           // PAIR 8: never freed here
#if SOMETHING
  cudaFree(p);                                           // BAD 10: after a preprocessor line
#endif
}
struct Leaky {
  Leaky() { MY_CHECK(cudaStreamCreate(&s_)); }           // PAIR 14: no destroy in Leaky
  ~Leaky() { cudaFree(nullptr); }
  cudaStream_t s_;
};
void comm() { ncclComm_t c; if (ncclCommInitRank(&c, 2, id, 0) != ncclSuccess) return; }   // PAIR 18
""",
    "good.cu": r"""#include "check.hpp"
// cudaFree(p) in a comment, and "cudaMalloc(" in a string, are not calls
cudaError_t cudaFakeDeclaration(int x);
const char* s = "cudaMalloc(&p, 4)";
struct Owner {
  Owner() {
    MY_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    MY_CHECK(
        cudaEventCreate(&ev_));
  }
  ~Owner() {
    cudaEventDestroy(ev_);
    cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ev_ = nullptr;
};
ncclResult_t issue(ncclComm_t c) { return ncclGroupEnd(); }
void f(float* p) {
  const cudaError_t rc = cudaMemcpy(p, p, 4, cudaMemcpyDeviceToDevice);
  if (rc != cudaSuccess) (void)cudaGetLastError();
  if (cudaGetDeviceCount(&n) != cudaSuccess) return;
  ncclResult_t st = ncclGroupStart();
  for (int q = 0; q < 4 && st == ncclSuccess; ++q) st = ncclSend(p, 1, ncclFloat, q, c, 0);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  cudaStream_t local = nullptr;
  MY_CHECK(cudaStreamCreate(&local));
  MY_CHECK(cudaStreamDestroy(local));
  try { g(); } catch (...) { cudaFree(p); throw; }
  auto lam = [&] { return cudaMemsetAsync(p, 0, 4, 0); };
  printf("%s", cudaGetErrorString(rc));
}
void* alloc_it(size_t n) { void* p = nullptr; MY_CHECK(cudaMalloc(&p, n)); return p; }
void device_free(void* p) { cudaFree(p); }
struct Comm {
  Comm() { ncclCommInitRankConfig(&comm_, 2, id, 0, &cfg) == ncclSuccess || die(); }
  ~Comm() { (void)ncclCommAbort(comm_); }
  ncclComm_t comm_;
};
""",
}
SELFTEST_CALLS = {("bad.cu:3", "cudaMemset"), ("bad.cu:4", "cudaMemcpy"), ("bad.cu:5", "cudaStreamSynchronize"),
                  ("bad.cu:7", "cudaDeviceSynchronize"), ("bad.cu:10", "cudaFree")}
SELFTEST_PAIRS = {("bad.cu:14", "cudaStreamCreate"), ("bad.cu:18", "ncclCommInitRank")}


def self_test():
    with tempfile.TemporaryDirectory() as d:
        for name, text in SELFTEST.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        _, macros, calls, pairs, owners, n = run_checks([d], d)
    problems = []
    got_calls = {(w, c) for w, c, _ in calls}
    got_pairs = {(w, c) for w, c, _ in pairs}
    print(f"self-test: {n} calls in the synthetic sources; status macros found: {sorted(macros)}")
    for w, c, why in calls + pairs:
        print(f"  found {w} {c}: {why}")
    if "MY_CHECK" not in macros:
        problems.append("the synthetic MY_CHECK macro was not recognised as a status check")
    if got_calls != SELFTEST_CALLS:
        problems.append(f"unchecked calls: missed {sorted(SELFTEST_CALLS - got_calls)}, "
                        f"wrongly reported {sorted(got_calls - SELFTEST_CALLS)}")
    if got_pairs != SELFTEST_PAIRS:
        problems.append(f"create/destroy pairs: missed {sorted(SELFTEST_PAIRS - got_pairs)}, "
                        f"wrongly reported {sorted(got_pairs - SELFTEST_PAIRS)}")
    want_owner = "owned by class Owner, created in Owner::Owner, destroyed in Owner::~Owner"
    if not any(want_owner in o for o in owners):
        problems.append(f"the owner report lacks '{want_owner}': {owners}")
    if not any("returned by alloc_it; released by device_free" in o for o in owners):
        problems.append(f"the owner report lacks the alloc_it / device_free pair: {owners}")
    if problems:
        print("FAILED: cuda calls self-test: " + "; ".join(problems))
        return 1
    print("VALID: cuda calls self-test (every planted defect found, nothing else)")
    return 0


def main():
    args = sys.argv[1:]
    if "-h" in args or "--help" in args:
        print(__doc__)
        return 0
    if "--self-test" in args:
        return self_test()
    verbose = "--verbose" in args
    paths = [a for a in args if not a.startswith("--")] or default_paths(ROOT)
    sources, macros, calls, pairs, owners, n = run_checks(paths, ROOT)
    print(f"{len(sources)} files, {n} CUDA / cuBLAS / cuDNN / NCCL calls; status macros: {', '.join(sorted(macros))}")
    print(f"created resources and their owners ({len(owners)}):")
    for o in owners if verbose else owners[:0]:
        print("  " + o)
    if not verbose:
        print("  (--verbose lists them)")
    for w, c, why in calls:
        print(f"UNCHECKED {w}: {c}: {why}")
    for w, c, why in pairs:
        print(f"UNPAIRED {w}: {c}: {why}")
    if calls or pairs:
        print(f"FAILED: cuda calls: {len(calls)} unchecked call(s), {len(pairs)} unpaired resource(s) "
              "(fix them, or add an entry with its reason to ALLOW / KEEP_FOREVER in scripts/check_cuda_calls.py)")
        return 1
    print("VALID: cuda calls (every status checked or allow-listed; every created resource released by its owner)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
