"""Shared parts of the CPU benchmarks against PyTorch (validation/bench_gpt.py, validation/bench_resnet.py):
the machine record (lscpu model and the bf16-related flags), the PyTorch configurations (torch 2.x from the venv of
validation/torch_venv.py: eager / torch.compile x fp32 / bf16 autocast; Debian's torch 1.13 in fp32), the alternating
rounds with per-row failure handling (a row that fails is reported with its reason and dropped, the others go on),
and the table / ratio / target lines. docs/performance.md "Benchmark rules"."""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEBIAN_PYTHON = "/usr/bin/python3"
BF16_FLAGS = ("avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
LOAD_AT_START = os.getloadavg()[0]


def cpu_info():
    """{'model', 'flags': {flag: bool}, 'cores', 'bf16': bool (AVX-512 BF16 present)} from lscpu (/proc/cpuinfo)."""
    model, flags = "?", set()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            k, _, v = line.partition(":")
            if k.strip() == "Model name":
                model = v.strip()
            elif k.strip() == "Flags":
                flags = set(v.split())
    except OSError:
        pass
    if not flags and os.path.exists("/proc/cpuinfo"):
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
            elif line.startswith("model name") and model == "?":
                model = line.split(":", 1)[1].strip()
    f = {x: x in flags for x in BF16_FLAGS}
    return {"model": model, "flags": f, "cores": os.cpu_count(), "bf16": f["avx512_bf16"]}


def cpu_line(ci):
    fl = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in ci["flags"].items())
    return f"{ci['model']}, {ci['cores']} cores; {fl}"


class Row:
    """One program configuration of the table. run() -> {'median_ms', 'min_ms', 'max_ms', ...} or raises RowFailed."""

    def __init__(self, name, run, kind, precision):
        self.name, self.run, self.kind, self.precision = name, run, kind, precision
        self.rounds, self.failed, self.extra = [], None, {}

    @property
    def ok(self):
        return self.failed is None and bool(self.rounds)

    def median(self):
        return statistics.median(r["median_ms"] for r in self.rounds)

    def spread(self):
        meds = [r["median_ms"] for r in self.rounds]
        return min(meds), max(meds)


class RowFailed(Exception):
    pass


def first_error_line(text):
    lines = [l.strip() for l in (text or "").splitlines() if l.strip()]
    for l in lines:
        if "error" in l.lower():
            return l[:300]
    return (lines[-1] if lines else "(no output)")[:300]


def torch_row(python, model, autocast, compile_, threads, steps, warmup, extra_args=()):
    """A run() callable: validation/torch_step_bench.py in `python` with the given configuration."""
    def run():
        cmd = [python, os.path.join(HERE, "torch_step_bench.py"), "--model", model, "--autocast", autocast,
               "--threads", str(threads), "--steps", str(steps), "--warmup", str(warmup), *extra_args]
        if compile_:
            cmd.append("--compile")
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
        except subprocess.TimeoutExpired:
            raise RowFailed("timed out after 1800 s")
        m = re.search(r"^TORCH_BENCH (\{.*\})$", p.stdout, re.M)
        if p.returncode != 0 or not m:
            raise RowFailed(f"exit {p.returncode}: {first_error_line(p.stderr + p.stdout)}")
        return json.loads(m.group(1))
    return run


def torch_rows(args, model, extra_args=(), log=print):
    """The PyTorch rows: 2.x eager / compile x fp32 / bf16 autocast (unless --skip-torch2), Debian's 1.13 fp32."""
    rows = []
    t2 = None
    if not args.skip_torch2:
        sys.path.insert(0, HERE)
        from torch_venv import torch2_python
        t2 = args.torch2_python or torch2_python(create=True, log=log)
    if t2:
        for comp in (False, True):
            for ac in ("none", "bf16"):
                name = f"PyTorch 2 {'compile' if comp else 'eager'} {'bf16 autocast' if ac == 'bf16' else 'fp32'}"
                rows.append(Row(name, torch_row(t2, model, ac, comp, args.threads, args.steps, args.warmup,
                                                extra_args), "torch2", "bf16" if ac == "bf16" else "fp32"))
    elif not args.skip_torch2:
        log("PyTorch 2.x rows skipped: no venv with torch 2.x (see above)")
    if os.path.exists(DEBIAN_PYTHON) and not args.skip_torch1:
        rows.append(Row("PyTorch 1.13 eager fp32",
                        torch_row(DEBIAN_PYTHON, model, "none", False, args.threads, args.steps, args.warmup,
                                  extra_args), "torch1", "fp32"))
    return rows, t2


def run_rounds(rows, rounds, log=print):
    """Alternates the rows round by round; a failing row is reported once and dropped."""
    for r in range(rounds):
        parts = []
        for row in rows:
            if row.failed:
                continue
            try:
                res = row.run()
            except RowFailed as e:
                row.failed = str(e)
                log(f"round {r + 1}: {row.name}: FAILED ({row.failed}); continuing without this row", flush=True)
                continue
            row.rounds.append(res)
            for k in ("torch", "adamw", "compile_s", "memory"):
                if k in res and k not in row.extra:
                    row.extra[k] = res[k]
            parts.append(f"{row.name} {res['median_ms']:.1f}")
        log(f"round {r + 1}: " + ", ".join(parts) + " (ms/step, medians)", flush=True)


def table(rows, per_step, unit, ref):
    """Table lines: ms/step (median of round medians), spread (min..max of the round medians), throughput, and the
    row's time over the `ref` row's (how much faster `ref` is), then the failed rows with their reasons."""
    out = [f"{'configuration':<30} {'ms/step':>9} {'spread (rounds)':>17} {unit:>10} {'x vs ' + ref.name if ref else '':>22}"]
    for row in rows:
        if row.ok:
            lo, hi = row.spread()
            rel = f"{row.median() / ref.median():.2f}" if ref and ref.ok else ""
            out.append(f"{row.name:<30} {row.median():9.1f} {f'{lo:.1f}..{hi:.1f}':>17} "
                       f"{per_step / row.median() * 1e3:10.0f} {rel:>22}")
    for row in rows:
        if row.failed:
            out.append(f"{row.name:<30} {'-':>9}  did not run: {row.failed}")
    return out


def ratio_lines(rows, target_name, target, ci):
    """hpctrain bf16 (and fp32) vs the fastest PyTorch configuration; the target judged (PASS/MISS) only on a CPU with
    AVX-512 BF16."""
    torch_ok = [r for r in rows if r.kind.startswith("torch") and r.ok]
    hp = {r.precision: r for r in rows if r.kind == "hpctrain"}
    out = []
    if not torch_ok:
        return ["no PyTorch configuration ran: no ratio"]
    fastest = min(torch_ok, key=lambda r: r.median())
    fastest32 = min((r for r in torch_ok if r.precision == "fp32"), key=lambda r: r.median(), default=None)
    out.append(f"fastest PyTorch configuration: {fastest.name} ({fastest.median():.1f} ms/step)")
    if "fp32" in hp and hp["fp32"].ok:
        out.append(f"hpctrain fp32 vs the fastest PyTorch: {fastest.median() / hp['fp32'].median():.2f}x"
                   + (f"; vs the fastest PyTorch fp32 ({fastest32.name}): "
                      f"{fastest32.median() / hp['fp32'].median():.2f}x" if fastest32 else ""))
    b = hp.get("bf16")
    if b is not None and b.ok:
        ratio = fastest.median() / b.median()
        out.append(f"hpctrain bf16 vs the fastest PyTorch: {ratio:.2f}x"
                   + (f"; vs hpctrain fp32: {hp['fp32'].median() / b.median():.2f}x" if hp.get("fp32") and
                      hp["fp32"].ok else ""))
        if ci["bf16"]:
            out.append(f"target {target_name}: hpctrain bf16 >= {target}x the fastest PyTorch: "
                       f"{'PASS' if ratio >= target else 'MISS'} ({ratio:.2f}x)")
        else:
            out.append(f"target {target_name} (>= {target}x): not judged, this CPU lacks AVX-512 BF16 (figures only)")
    else:
        why = b.failed if b is not None else "no such row"
        out.append(f"target {target_name} (hpctrain bf16 >= {target}x the fastest PyTorch): not judged, hpctrain "
                   f"bf16 did not run ({why})")
    return out


def versions(rows):
    seen = {}
    for r in rows:
        if r.kind.startswith("torch") and "torch" in r.extra:
            seen.setdefault(r.kind, r.extra["torch"])
    return seen


def command_line():
    return "/usr/bin/python3 " + " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])


def header(title, ci, rows, t2_python, args, model_line, method_extra=""):
    v = versions(rows)
    comp = [f"{r.name}: {r.extra['compile_s']:.1f} s" for r in rows if "compile_s" in r.extra]
    adamw = sorted({f"{r.extra['torch']}: {r.extra['adamw']}" for r in rows if "adamw" in r.extra})
    lines = [f"# {title}", "",
             f"- command (from the repository root): `{command_line()}`",
             f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             f"- CPU: {cpu_line(ci)}",
             f"- threads: {args.threads} (PyTorch torch.set_num_threads and OMP_NUM_THREADS; hpctrain OMP_NUM_THREADS), "
             f"one rank",
             f"- PyTorch: 2.x {v.get('torch2', 'not run')} (PyPI, venv {t2_python or '-'}), Debian "
             f"{v.get('torch1', 'not run')} (/usr/bin/python3)" + (f"; AdamW {', '.join(adamw)}" if adamw else ""),
             f"- model: {model_line}",
             f"- method: {args.rounds} alternated rounds (every configuration once per round, each in its own "
             f"process), per round the median of {args.steps - args.warmup} steps after {args.warmup} warm-up steps; "
             f"the figure is the median of the round medians, the spread their min..max{method_extra}"]
    load = os.getloadavg()[0]
    lines.append(f"- machine load (1-minute load average) at start / end: {LOAD_AT_START:.2f} / {load:.2f}"
                 + (f" (above the {args.threads} threads: other work shared the cores, the figures are not "
                    "trustworthy)" if max(LOAD_AT_START, load) > args.threads + 0.5 else ""))
    if comp:
        lines.append("- torch.compile's first step (compilation, inductor cache warm or cold): " + "; ".join(comp))
    return lines


def have(path):
    return os.path.exists(path) or shutil.which(path) is not None
