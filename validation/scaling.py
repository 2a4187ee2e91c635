#!/usr/bin/python3
"""Scaling campaign (scaling validation): strong and weak data-parallel scaling of train_gpt
(inputs/bench_gpt.toml, ~220 ms/step serial on 2 cores) and train_resnet (inputs/resnet20_fmnist.toml, ~100 ms/step),
measured through the apps' contracts only (command line, --set, stdout PERFORMANCE and memory lines, metrics.jsonl,
exit codes; docs/contracts.md), never their internals.

  strong: a fixed global batch (the deck's) over every R in --ranks. The micro-batch is the deck's, lowered until it
          divides global_batch / R for every R of the campaign, and then kept constant (the report says which).
  weak:   a fixed per-rank batch P (default: the deck's global batch / 2), global_batch = R x P, the same micro-batch.
Threads per rank: OMP_NUM_THREADS = max(1, C // R) for C = os.cpu_count(), so the ranks share the C cores; R > C is
oversubscribed (R ranks at 1 thread on C cores), and its efficiency then mostly measures the oversubscription.
Calibration runs: R = 1 also runs at every thread count an R > 1 point runs per rank and R = 1 does not (1 thread
here, against 2), at the weak mode's per-rank batch, as max(R, C / t) independent copies at once (the cores as busy
as at the points it calibrates, oversubscribed as they are; the slowest copy's ms/step is the run's, as a synchronous
step waits for its slowest rank), because validation/perf_model.py takes the compute time
of a point at t threads per rank from them (per-core throughput is not constant in the thread count, and a core runs
slower while its neighbours work: 2 vCPUs may be one physical core's hyperthreads).
They are no scaling points: mode and role `calibration` in the CSV, no efficiencies, a table of their own, not plotted.

Recorded per run (one job at a time, mpirun -np R --oversubscribe --bind-to none): the PERFORMANCE line's median
ms/step over the steps after the first, throughput (tokens/s or images/s), comm_exposed_ms (median; and the mean of
metrics.jsonl's comm_exposed_ms over the same steps), the log's "memory per rank ... total", the peak RSS of the
largest process of the job (wait4), R, threads, cores used, global batch, micro-batch.
Efficiencies against the R = 1 run of the same app and mode:
  strong  E = T(1) / (R T(R))                      weak  E = T(1) / T(R)         (the textbook ones, as asked)
  per-core E_c = (throughput(R) / cores(R)) / (throughput(1) / cores(1)),  cores(R) = min(C, R x threads)
With the cores fixed (threads = C // R), the textbook E is capped at cores(R) / (R cores(1)) = 1/R for R <= C;
E_c is the one whose ideal is 1 (strong: T(1)/T(R) for R <= C).

Under Slurm (--launcher srun, inside an allocation: what slurm/scaling.sh does), every job is a job step
`srun --mpi=pmix --kill-on-bad-exit=1 -N <nodes> -n R -c T` with T = --threads (default SLURM_CPUS_PER_TASK) threads
per rank at every R, on ceil(R / tasks-per-node) nodes: each rank has its own cores, as on a cluster, so
cores(R) = R x T, the textbook and per-core efficiencies coincide and their ideal is 1. R may not exceed the
allocation's tasks. The peak RSS column is empty there (wait4 sees srun, not the ranks).

usage: validation/scaling.py [--ranks 1 2 4] [--apps gpt resnet] [--steps N] [--quick] [--out DIR] [--report F.md]
                             [--repeat K] [--train-gpt EXE] [--train-resnet EXE]
  --repeat  runs per configuration, round-robin over the configurations; the fastest is kept (see keep())
            (default 5; --quick: 1)
  --quick   ranks 1 2 (unless --ranks is given), 5 steps, 1 run each, both apps: the ctest `validation_scaling_quick`
Writes DIR/<app>_<mode>_R<r>/ and DIR/<app>_calibration_R1_T<t>/ run directories (with command.txt and stdout.txt),
and scaling.csv (one row per run, `kept` marking the fastest run of each configuration, `role` scaling or calibration)
and scaling.png (throughput and efficiency vs ranks) next to the report (or in DIR without --report), the report;
prints the table, and last `VALID` (every run exited 0 and produced its records; no pass/fail on speed) or
`FAILED: <what>` (exit 1)."""
import argparse
import csv
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
import tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from campaign import REPO, machine_info, output_dirs  # noqa: E402

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
C = os.cpu_count() or 1

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--ranks", type=int, nargs="+", help="rank counts (default 1 2 4; --quick: 1 2); 1 is always run")
ap.add_argument("--apps", nargs="+", choices=["gpt", "resnet"], default=["gpt", "resnet"])
ap.add_argument("--steps", type=int, help="optimizer steps per run (default 20; --quick: 5); the first is not timed")
ap.add_argument("--quick", action="store_true", help="ranks 1 2, 5 steps (the ctest)")
ap.add_argument("--out", default=os.path.join(REPO, "runs", "scaling"), help="work directory (wiped first)")
ap.add_argument("--report", help="write the markdown report here (the CSV and PNG go next to it)")
ap.add_argument("--train-gpt", default=os.path.join(REPO, "build", "apps", "train_gpt"))
ap.add_argument("--train-resnet", default=os.path.join(REPO, "build", "apps", "train_resnet"))
ap.add_argument("--gpt-deck", default=os.path.join(REPO, "inputs", "bench_gpt.toml"))
ap.add_argument("--resnet-deck", default=os.path.join(REPO, "inputs", "resnet20_fmnist.toml"))
ap.add_argument("--gpt-weak-batch", type=int, help="weak scaling: sequences per rank (default deck global_batch / 2)")
ap.add_argument("--resnet-weak-batch", type=int, help="weak scaling: images per rank (default deck global_batch / 2)")
ap.add_argument("--resnet-eval-images", type=int, default=256, help="test images evaluated at the end (default 256)")
ap.add_argument("--repeat", type=int, help="runs per configuration, round-robin, the fastest is kept "
                "(default 5; --quick: 1)")
ap.add_argument("--timeout", type=float, default=300, help="seconds per job before it counts as failed")
ap.add_argument("--launcher", choices=["mpirun", "srun"], default="mpirun",
                help="mpirun on this machine (default), or srun job steps inside a Slurm allocation (slurm/scaling.sh)")
ap.add_argument("--threads", type=int, help="OpenMP threads per rank at every R (default: max(1, cores // R) with "
                "mpirun; SLURM_CPUS_PER_TASK with srun)")
ap.add_argument("--srun-mpi", default=os.environ.get("HPCT_SRUN_MPI", "pmix"), help="srun's --mpi plugin (default pmix)")
args = ap.parse_args()
SRUN = args.launcher == "srun"
if SRUN:  # the allocation: tasks, nodes, CPUs per task; C = the CPUs Slurm gave the job's tasks
    def senv(k, default=None):
        v = os.environ.get(k, default)
        try:
            return int(str(v).split("(")[0].split(",")[0])
        except (TypeError, ValueError):
            print(f"FAILED: --launcher srun needs a Slurm allocation ({k}={v!r}): run inside sbatch/salloc "
                  "(slurm/scaling.sh)")
            sys.exit(1)
    S_TASKS, S_NODES = senv("SLURM_NTASKS"), senv("SLURM_JOB_NUM_NODES", "1")
    S_TPN = -(-S_TASKS // S_NODES)
    if args.threads is None:
        args.threads = senv("SLURM_CPUS_PER_TASK", "1")
    C = S_TASKS * args.threads
ranks = sorted(set([1] + (args.ranks or ([1, 2] if args.quick else [1, 2, 4]))))
N = args.steps or (5 if args.quick else 20)
REPEAT = max(1, args.repeat or (1 if args.quick else 5))
if SRUN and max(ranks) > S_TASKS:
    ap.error(f"--ranks {max(ranks)} exceeds the allocation's {S_TASKS} tasks (sbatch --ntasks / --nodes)")
if N < 2:
    ap.error("--steps must be >= 2 (the PERFORMANCE median excludes the first step)")
exes = {"gpt": args.train_gpt, "resnet": args.train_resnet}
for app in args.apps:
    if not os.access(exes[app], os.X_OK):
        print(f"FAILED: {exes[app]} is not an executable (build the apps, or pass --train-gpt/--train-resnet)")
        sys.exit(1)
out_root, art_dir, stem = output_dirs(args.out, args.report, "scaling")
csv_path = os.path.join(art_dir, stem + ".csv")
png_path = os.path.join(art_dir, stem + ".png")

# every run: no checkpoint, no sample, little stdout; ResNet by steps, not epochs, on a small test subset
QUIET = {"gpt": ["checkpoint.at_end=false", "sample.tokens=0", "train.eval_every=0", "log.every=5"],
         "resnet": ["checkpoint.at_end=false", "checkpoint.every_minutes=0", "train.epochs=0", "train.eval_every=0",
                    "optim.warmup_steps=0", f"data.eval_images={args.resnet_eval_images}", "log.every=5"]}
UNIT = {"gpt": "tokens/s", "resnet": "images/s"}
decks, plans, notes = {}, {}, []
for app in args.apps:
    with open(args.gpt_deck if app == "gpt" else args.resnet_deck, "rb") as f:
        decks[app] = tomllib.load(f)
    gb, mb0 = decks[app]["train"]["global_batch"], decks[app]["train"]["micro_batch"]
    strong_r = [r for r in ranks if gb % r == 0]
    for r in ranks:
        if r not in strong_r:
            notes.append(f"{app} strong R={r} skipped: global_batch {gb} is not a multiple of {r}")
    mb = mb0
    while mb > 1 and any((gb // r) % mb for r in strong_r):
        mb -= 1
    P = (args.gpt_weak_batch if app == "gpt" else args.resnet_weak_batch) or max(1, gb // 2)
    wmb = mb
    while wmb > 1 and P % wmb:
        wmb -= 1
    notes.append(f"{app}: strong global_batch {gb} (deck), micro_batch {mb} at every R (deck {mb0}; the largest "
                 f"<= {mb0} dividing global_batch / R for R in {strong_r}), so R ranks run {gb} / (R x {mb}) "
                 f"micro-batches each; weak {P} per rank (global_batch R x {P}), micro_batch {wmb}")
    plans[app] = dict(strong=[(r, gb, mb) for r in strong_r], weak=[(r, r * P, wmb) for r in ranks], P=P)


# ---------------------------------------------------------------------------------------------------- running
def threads(r):
    return args.threads if args.threads else max(1, C // r)


def launcher(r):
    if SRUN:
        nodes = -(-r // S_TPN)
        return ["srun", f"--mpi={args.srun_mpi}", "--kill-on-bad-exit=1", "-N", str(nodes), "-n", str(r), "-c",
                str(threads(r))]
    return ["mpirun", "-np", str(r), "--oversubscribe", "--bind-to", "none"]


def run_job(app, mode, r, gb, mb, rep, thr, copies=1):
    """One job; with copies > 1 (calibration runs) that many independent copies of it at once, in DIR_copy<i>, so
    that they occupy the cores as the R > 1 points' ranks do. Returns (out, command, rc, seconds, stdout, peak RSS MiB)
    per copy, copy 0 first."""
    name = f"{app}_{mode}_R{r}" if mode != "calibration" else f"{app}_calibration_R1_T{thr}"
    out0 = os.path.join(out_root, name + (f"_run{rep}" if REPEAT > 1 else ""))
    deck = args.gpt_deck if app == "gpt" else args.resnet_deck
    env = dict(ENV, OMP_NUM_THREADS=str(thr))
    jobs = []
    t0 = time.time()
    for i in range(copies):
        out = out0 if i == 0 else f"{out0}_copy{i}"
        os.makedirs(out, exist_ok=True)
        c = launcher(r) + [exes[app], deck, "--out", out]
        for s in QUIET[app] + [f"train.steps={N}", f"train.global_batch={gb}", f"train.micro_batch={mb}"]:
            c += ["--set", s]
        f = open(os.path.join(out, "stdout.txt"), "w")
        jobs.append((out, c, f, subprocess.Popen(c, stdout=f, stderr=subprocess.STDOUT, env=env,
                                                 start_new_session=True)))
    timed_out = []

    def kill():
        timed_out.append(1)
        for *_, p in jobs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    timer = threading.Timer(args.timeout, kill)
    timer.start()
    results = []
    for i, (out, c, f, p) in enumerate(jobs):
        _, status, ru = os.wait4(p.pid, 0)  # ru_maxrss: the largest process of the job's tree (KiB)
        f.close()
        rc = 124 if timed_out else os.waitstatus_to_exitcode(status)
        dt = time.time() - t0
        cmd = f"OMP_NUM_THREADS={thr} " + shlex.join(c)
        with open(os.path.join(out, "command.txt"), "w") as g:
            g.write(cmd + (f" (copy {i} of {copies} at once)" if copies > 1 else "")
                    + f"\n# rc {rc} in {dt:.2f} s\n")
        with open(os.path.join(out, "stdout.txt"), errors="replace") as g:
            text = g.read()
        results.append((out, cmd, rc, dt, text, None if SRUN else ru.ru_maxrss / 1024.0))
    timer.cancel()
    return results


def mib(v, unit):
    return float(v) * {"B": 2**-20, "KiB": 2**-10, "MiB": 1.0, "GiB": 1024.0}[unit]


def parse(text, out):
    """PERFORMANCE header + values -> dict; memory per rank total (MiB); metrics.jsonl records."""
    perf, problems = None, []
    lines = [l for l in text.splitlines() if l.startswith("PERFORMANCE")]
    if len(lines) >= 2:
        keys = [k for k in lines[-2].split()[1:] if k != "|"]
        vals = [v for v in lines[-1].split()[1:] if v != "|"]
        if len(keys) == len(vals):
            perf = dict(zip(keys, vals))
    if perf is None:
        problems.append("no PERFORMANCE line")
    m = re.search(r"^memory per rank:.*\btotal ([0-9.]+) (B|KiB|MiB|GiB)", text, re.M)
    mem = mib(m.group(1), m.group(2)) if m else None
    if mem is None:
        problems.append("no 'memory per rank ... total' line")
    m = re.search(r"^memory, max over the \d+ ranks:.*\btotal ([0-9.]+) (B|KiB|MiB|GiB)", text, re.M)
    mem_max = mib(m.group(1), m.group(2)) if m else None
    recs = []
    try:
        with open(os.path.join(out, "metrics.jsonl")) as f:
            recs = [json.loads(l) for l in f if l.strip()]
    except (OSError, ValueError) as e:
        problems.append(f"metrics.jsonl: {e}")
    if [r.get("step") for r in recs] != list(range(1, N + 1)):
        problems.append(f"metrics.jsonl holds {len(recs)} steps, not 1..{N}")
    return perf, mem, mem_max, recs, problems


def fnum(d, k):
    try:
        return float(d[k])
    except (KeyError, TypeError, ValueError):
        return None


rows, all_runs = [], []  # rows: one kept run per configuration; all_runs: every run (the CSV)


def one_try(app, mode, r, gb, mb, thr, copies, rep):
    """Run `rep` of one configuration: its CSV row. mode "calibration": `copies` R = 1 runs at thr threads at once
    (see calibration_plan)."""
    jobs = run_job(app, mode, r, gb, mb, rep, thr, copies)
    out, cmd, rc, dt, text, rss = jobs[0]
    perf, mem, mem_max, recs, problems = parse(text, out)
    copy_ms = [fnum(perf, "ms/step")]
    for o_i, _, rc_i, _, text_i, _ in jobs[1:]:
        perf_i, *_, problems_i = parse(text_i, o_i)
        copy_ms.append(fnum(perf_i, "ms/step"))
        problems += [f"copy {o_i}: {x}" for x in problems_i] + ([f"copy {o_i}: exit code {rc_i}"] if rc_i else [])
    if rc != 0:
        tail = [l for l in text.strip().splitlines() if l.strip()]
        problems.insert(0, f"exit code {rc}" + (f": {tail[-1][:160]}" if tail else ""))
    if copies > 1 and perf is not None and None not in copy_ms:
        # the slowest copy stands for the run: the copies stand for a job's ranks, and a synchronous data-parallel
        # step ends when its slowest rank does (the mean would credit the job with the speed of its fastest ranks)
        perf = dict(perf, **{"ms/step": str(max(copy_ms))})
    timed = recs[1:]
    row = dict(app=app, mode=mode, role="calibration" if mode == "calibration" else "scaling", ranks=r,
               threads=thr, cores=min(C, r * thr), oversubscribed=r * thr > C, global_batch=gb, micro_batch=mb,
               micro_batches_per_rank=gb // (r * mb), steps=N, rc=rc, wall_s=round(dt, 2),
               ms_step=fnum(perf, "ms/step"), throughput=fnum(perf, UNIT[app]),
               throughput_per_rank=fnum(perf, UNIT[app] + "/rank"),
               comm_exposed_ms=fnum(perf, "comm_exposed_ms"), comm_exposed_frac=fnum(perf, "comm_exposed_frac"),
               comm_exposed_mean_ms=(statistics.fmean(float(x.get("comm_exposed_ms") or 0) for x in timed)
                                     if timed else None),
               ms_step_jsonl=statistics.median(float(x["ms"]) for x in timed) if timed else None,
               mem_per_rank_mib=mem, mem_max_rank_mib=mem_max, peak_rss_mib=round(rss, 1) if rss is not None else None,
               problems="; ".join(problems), command=cmd, out=os.path.relpath(out, REPO), copies=copies,
               ms_step_copies=" ".join(f"{x:.2f}" if x else "-" for x in copy_ms))
    return row


def keep(tries):
    """The REPEAT runs of one configuration, made round-robin over the configurations; every run goes to all_runs (the
    CSV), the fastest is returned (`kept`): the run least disturbed by load from outside the job. On a shared VM that
    load is large and comes in spells of seconds to minutes, on one vCPU or both: the same job ran at 309 and 506
    ms/step within two minutes, two copies of one job side by side at 286 and 455. The fastest run of each
    configuration, points and calibrations alike, is what the machine does undisturbed, so the performance model
    compares like with like."""
    app, mode, r, gb, mb, thr = (tries[0][k] for k in ("app", "mode", "ranks", "global_batch", "micro_batch",
                                                        "threads"))
    ok = [T for T in tries if not T["problems"]]
    if len(ok) == len(tries):  # the fastest run stands for the configuration
        row = min(tries, key=lambda T: T["ms_step"])
    else:
        row = next(T for T in tries if T["problems"])
    for T in tries:
        T["kept"] = T is row
        T["repeats"] = len(tries)
    all_runs.extend(tries)
    row["ms_step_runs"] = " ".join(f"{T['ms_step']:.2f}" if T["ms_step"] else "-" for T in tries)
    problems = row["problems"]
    mem = row["mem_per_rank_mib"]
    ms = f"{row['ms_step']:8.2f}" if row["ms_step"] is not None else "       -"
    tp = f"{row['throughput']:9.1f}" if row["throughput"] is not None else "        -"
    copies = tries[0].get("copies", 1)
    print(f"  {app:<6} {mode[:6]:<6} R={r}{f'x{copies}' if copies > 1 else ''} thr={thr} gb={gb:<4} mb={mb:<3} {ms} ms/step {tp} {UNIT[app]}"
          f"  comm {row['comm_exposed_ms'] if row['comm_exposed_ms'] is not None else '-'} ms"
          f"  mem {mem if mem is not None else '-'} MiB  runs {row['ms_step_runs']}" + (f"  [{row['problems']}]" if problems
                                                                         else ""), flush=True)
    return row


def calibration_plan(app):
    """The R = 1 runs the performance model (validation/perf_model.py) needs besides the scaling points: one per
    thread count that an R > 1 point runs per rank and R = 1 does not (here 1 thread, against 2 at R = 1). Per-core
    throughput is not constant in the thread count (a 2-thread ResNet step can run at 0.75 of twice its 1-thread
    speed), so the model takes the compute time of a point at t threads per rank from an R = 1 run at t threads
    instead of extrapolating the R = 1 run at C threads. And max(R, C / t) copies run at once (run_job), the cores as
    busy as at the point: a rank's compute rate depends on what the other cores do (shared caches, memory bandwidth,
    hyperthread siblings, clocks; one 1-thread job alone ran at 300 ms/step, beside a second one at 410-490 on the
    2-vCPU development VM), and an oversubscribed point (R x t > C) is calibrated by R copies time-sliced on the C
    cores as its ranks are, not by an assumed perfect time-slicing. Returns (threads, copies, batch, micro-batch).
    Batch: the weak mode's per-rank batch P and micro-batch, the
    per-rank work of most R > 1 points (weak at every R; strong at R = 2 when P = global_batch / 2). These rows are
    not scaling points: mode and role `calibration` in the CSV, no efficiencies, not in the tables of the scaling
    points nor in the plot. Under srun, or with --threads, every R runs the same threads: no calibration runs."""
    if SRUN or args.threads:  # every R at the same threads, each rank on cores of its own: nothing to calibrate
        return []
    P, (_, _, wmb) = plans[app]["P"], plans[app]["weak"][0]
    need = sorted({(threads(r), max(r, C // threads(r))) for r in ranks if r > 1} - {(threads(1), 1)})
    return [(t, k, P, wmb) for t, k in need]


t_start = time.time()
command = "validation/scaling.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
print(f"scaling campaign: apps {args.apps}, ranks {ranks}, {N} steps per run, {REPEAT} run(s) per configuration, {C} cores "
      + (f"in the Slurm allocation ({S_TASKS} tasks on {S_NODES} node(s)), srun job steps, {args.threads} threads per rank"
         if SRUN else f"(OMP_NUM_THREADS = " + (str(args.threads) if args.threads else f"max(1, {C} // R)") + ")"),
      flush=True)
for n in notes:
    print("  " + n)
for app in args.apps:
    for t, k, gb, mb in calibration_plan(app):
        notes_c = (f"{app}: calibration run R=1 at {t} thread(s), {k} copies at once, global_batch {gb}, micro_batch "
                   f"{mb} (the compute time of the R > 1 points at {t} thread(s) per rank with {k} ranks on the "
                   f"{C} cores, for validation/perf_model.py; not a scaling point)")
        notes.append(notes_c)
        print("  " + notes_c)
calib_rows = []  # one kept run per calibration configuration (R = 1 at fewer threads than the R = 1 point)
configs = []  # (app, mode, r, gb, mb, threads), in the order of the tables
for app in args.apps:
    for mode in ("strong", "weak"):
        configs += [(app, mode, r, gb, mb, threads(r), 1) for r, gb, mb in plans[app][mode]]
    configs += [(app, "calibration", 1, gb, mb, t, k) for t, k, gb, mb in calibration_plan(app)]
# one job per command: a configuration of the weak mode that is the same job as one of the strong mode (strong R = 2
# with global_batch / 2 per rank is weak R = 2 with P = global_batch / 2) runs once and stands in both tables; two
# separate measurements of one job would only compare the machine's load at two moments
first_of, same_job = {}, {}
for c in configs:
    key = (c[0], c[1] == "calibration") + c[2:]
    if key in first_of:
        same_job[c] = first_of[key]
        notes.append(f"{c[0]} {c[1]} R={c[2]} is the same job as {c[0]} {first_of[key][1]} R={c[2]} (global_batch "
                     f"{c[3]}, micro_batch {c[4]}, {c[5]} thread(s) per rank): run once, reported in both modes")
        print("  " + notes[-1])
    else:
        first_of[key] = c
tries = {c: [] for c in configs}
for rep in range(1, REPEAT + 1):  # round-robin: run rep of every configuration, then the next rep (see keep)
    for c in configs:
        if c not in same_job:
            tries[c].append(one_try(*c, rep))
for c in configs:
    if c in same_job:
        o = same_job[c]
        tries[c] = [dict(T, mode=c[1], same_job_as=f"{o[1]} R={o[2]}") for T in tries[o]]
    (calib_rows if c[1] == "calibration" else rows).append(keep(tries[c]))
total_s = time.time() - t_start

# efficiencies against R = 1 of the same app and mode
for R in rows:
    base = next((B for B in rows if B["app"] == R["app"] and B["mode"] == R["mode"] and B["ranks"] == 1), None)
    R["eff"] = R["eff_core"] = R["speedup"] = None
    if base and base["ms_step"] and R["ms_step"] and base["throughput"] and R["throughput"]:
        t1, tr, r = base["ms_step"], R["ms_step"], R["ranks"]
        R["speedup"] = t1 / tr
        R["eff"] = t1 / (r * tr) if R["mode"] == "strong" else t1 / tr
        R["eff_core"] = (R["throughput"] / R["cores"]) / (base["throughput"] / base["cores"])
    R["eff_cap"] = R["cores"] / (R["ranks"] * (base["cores"] if base else C))  # textbook E at perfect per-core scaling

measured = [R for R in all_runs if not R.get("same_job_as")]  # a shared job's run counts once
bad = [R for R in measured if R["problems"]]
final = "VALID" if not bad and rows else \
    f"FAILED: {len(bad)} of {len(measured)} runs (" + "; ".join(f"{R['app']} {R['mode']} R={R['ranks']}: {R['problems']}"
                                                         for R in bad[:3]) + ")"

# ---------------------------------------------------------------------------------------------------- outputs
machine = machine_info(("Core(s) per socket", "Socket(s)", "L3 cache"))
machine["os.cpu_count()"] = os.cpu_count()
if SRUN:
    for k in ("SLURM_JOB_ID", "SLURM_CLUSTER_NAME", "SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES", "SLURM_NTASKS",
              "SLURM_CPUS_PER_TASK", "SLURM_JOB_PARTITION"):
        if os.environ.get(k):
            machine[k] = os.environ[k]

FIELDS = ["app", "mode", "role", "ranks", "threads", "cores", "oversubscribed", "global_batch", "micro_batch",
          "micro_batches_per_rank", "steps", "rc", "repeats", "kept", "copies", "ms_step_copies", "ms_step", "ms_step_runs", "ms_step_jsonl", "throughput", "throughput_per_rank",
          "speedup", "eff", "eff_core", "eff_cap", "comm_exposed_ms", "comm_exposed_frac", "comm_exposed_mean_ms",
          "mem_per_rank_mib", "mem_max_rank_mib", "peak_rss_mib", "wall_s", "problems", "same_job_as", "out", "command"]


def rnd(v):
    return round(v, 4) if isinstance(v, float) else v


with open(csv_path, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=FIELDS + ["unit"])
    w.writeheader()
    for R in all_runs:
        w.writerow({**{k: rnd(R.get(k)) for k in FIELDS}, "unit": UNIT[R["app"]]})

plot_note = ""
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(2, len(args.apps), figsize=(6.5 * len(args.apps), 8), squeeze=False)
    for j, app in enumerate(args.apps):
        for mode, col in (("strong", "tab:blue"), ("weak", "tab:orange")):
            rs = [R for R in rows if R["app"] == app and R["mode"] == mode and R["throughput"]]
            x = [R["ranks"] for R in rs]
            ax[0, j].plot(x, [R["throughput"] for R in rs], "o-", color=col,
                          label=f"{mode} (global batch " + ("fixed" if mode == "strong" else "R x per-rank") + ")")
            ax[1, j].plot(x, [R["eff_core"] for R in rs], "o-", color=col, label=f"{mode}: per-core efficiency")
            ax[1, j].plot(x, [R["eff"] for R in rs], "s--", color=col, alpha=0.6,
                          label=f"{mode}: " + ("T(1)/(R T(R))" if mode == "strong" else "T(1)/T(R)"))
        caps = sorted({(R["ranks"], R["eff_cap"]) for R in rows if R["app"] == app})
        ax[1, j].plot([c[0] for c in caps], [c[1] for c in caps], ":", color="gray",
                      label="textbook ceiling at fixed cores: cores(R)/(R cores(1))")
        ax[1, j].axhline(1.0, color="black", lw=0.8)
        for a in ax[:, j]:
            a.set_xscale("log", base=2)
            a.set_xticks(ranks)
            a.set_xticklabels([str(r) for r in ranks])
            if max(ranks) > C:
                a.axvspan(C * 1.25, max(ranks) * 1.2, color="red", alpha=0.07)
        ax[0, j].set_title(f"train_{app} ({os.path.basename(args.gpt_deck if app == 'gpt' else args.resnet_deck)}), "
                           + (f"srun, {args.threads} threads per rank" if SRUN else f"{C} cores, OMP threads = "
                              + (str(args.threads) if args.threads else f"max(1, {C}//R)")) + (f"; shaded: R > {C} oversubscribed"
                                                                          if max(ranks) > C else ""), fontsize=9)
        ax[0, j].set_ylabel(f"throughput ({UNIT[app]})")
        ax[0, j].set_ylim(bottom=0)
        ax[0, j].legend(fontsize=8)
        ax[1, j].set_ylabel("efficiency vs R = 1")
        ax[1, j].set_ylim(0, 1.3)
        ax[1, j].set_xlabel("ranks R (data parallel)")
        ax[1, j].legend(fontsize=7, loc="lower left")
    fig.suptitle(f"DP scaling on CPU, {N} steps per run (median ms/step after the first): {final.split(':')[0]}")
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
except ImportError:
    plot_note = "no plot: matplotlib is not installed for /usr/bin/python3 (apt-get install python3-matplotlib)"
    png_path = None
    print(plot_note)


def f2(v, fmt=".2f"):
    return "—" if v is None else format(v, fmt)


def table(app):
    lines = [f"| mode | R | threads/rank | global batch | micro-batch (per rank) | ms/step | {UNIT[app]} | speedup "
             "T(1)/T(R) | efficiency (textbook) | per-core efficiency | comm exposed ms (frac) | memory/rank MiB "
             "| peak RSS MiB | exit |",
             "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
    for R in rows:
        if R["app"] != app:
            continue
        o = " (oversubscribed)" if R["oversubscribed"] else ""
        lines.append(f"| {R['mode']} | {R['ranks']}{o} | {R['threads']} | {R['global_batch']} | {R['micro_batch']} "
                     f"(x{R['micro_batches_per_rank']}) | {f2(R['ms_step'])} | {f2(R['throughput'], '.0f')} | "
                     f"{f2(R['speedup'])} | {f2(R['eff'])} | {f2(R['eff_core'])} | {f2(R['comm_exposed_ms'])} "
                     f"({f2(R['comm_exposed_frac'], '.3f')}) | {f2(R['mem_per_rank_mib'], '.1f')} | "
                     f"{f2(R['peak_rss_mib'], '.0f')} | {R['rc']}" + (f": {R['problems']}" if R["problems"] else "")
                     + " |")
    return "\n".join(lines)


def calib_table(app):
    """The calibration runs of app (R = 1 at fewer threads than the R = 1 scaling point), beside that point's weak-mode
    run of the same batch: the threading efficiency of going from t to threads(1) threads in one process, which the
    old constant-per-core-throughput model took as 1."""
    w1 = get(app, "weak", 1)
    lines = ["| threads | global batch | micro-batch | ms/step | " + UNIT[app] + " | runs (ms/step) | "
             f"{threads(1)}-thread R = 1 run of the same batch: ms/step, per-core throughput vs this run | exit |",
             "|---:|---:|---:|---:|---:|---|---|---:|"]
    for R in calib_rows:
        if R["app"] != app:
            continue
        rel = "—"
        if w1 and w1["global_batch"] == R["global_batch"] and w1["throughput"] and R["throughput"]:
            rel = (f"{w1['ms_step']:.2f}, {(w1['throughput'] / w1['threads']) / (R['throughput'] / R['threads']):.2f}")
        lines.append(f"| {R['threads']} | {R['global_batch']} | {R['micro_batch']} | {f2(R['ms_step'])} | "
                     f"{f2(R['throughput'], '.0f')} | {R.get('ms_step_runs', '')} | {rel} | {R['rc']}"
                     + (f": {R['problems']}" if R["problems"] else "") + " |")
    return "\n".join(lines)


def get(app, mode, r):
    return next((R for R in rows if R["app"] == app and R["mode"] == mode and R["ranks"] == r), None)


def reading():
    out = []
    for app in args.apps:
        s1, s2 = get(app, "strong", 1), get(app, "strong", 2)
        w1, w2 = get(app, "weak", 1), get(app, "weak", 2)
        bits = []
        if s1 and s2 and s1["ms_step"] and s2["ms_step"]:
            bits.append(f"strong R=2 ({s2['threads']} thread(s) each) vs R=1 ({s1['threads']} threads): {s1['ms_step']:.1f} -> "
                        f"{s2['ms_step']:.1f} ms/step, per-core efficiency {f2(s2['eff_core'])} (textbook "
                        f"T(1)/(2 T(2)) = {f2(s2['eff'])}, ceiling {s2['eff_cap']:.2f}); exposed communication "
                        f"{f2(s2['comm_exposed_ms'])} ms = {100 * (s2['comm_exposed_frac'] or 0):.1f} % of the step")
        if w1 and w2 and w1["ms_step"] and w2["ms_step"]:
            bits.append(f"weak R=2: {w1['ms_step']:.1f} -> {w2['ms_step']:.1f} ms/step for twice the work, per-core "
                        f"efficiency {f2(w2['eff_core'])} (T(1)/T(2) = {f2(w2['eff'])}, ceiling {w2['eff_cap']:.2f})")
        big = [R for R in rows if R["app"] == app and R["oversubscribed"] and R["eff_core"]]
        if big:
            bits.append("oversubscribed " + ", ".join(f"{R['mode']} R={R['ranks']}: per-core efficiency "
                                                      f"{R['eff_core']:.2f}, comm exposed "
                                                      f"{f2(R['comm_exposed_ms'])} ms" for R in big))
        if bits:
            out.append(f"- **train_{app}**: " + "; ".join(bits) + ".")
    return out


print()
for app in args.apps:
    print(f"train_{app}:")
    print(table(app))
    if any(R["app"] == app for R in calib_rows):
        print(f"train_{app} calibration (R = 1, not scaling points):")
        print(calib_table(app))
if args.report:
    md = ["# Data-parallel scaling on CPU: train_gpt and train_resnet, strong and weak", "",
          "`validation/scaling.py` drives `train_gpt` and `train_resnet` through their contracts only (command line, "
          "`--set`, the stdout PERFORMANCE and `memory per rank` lines, `metrics.jsonl`, exit codes), one job at a "
          f"time, and records per run the PERFORMANCE line's ms/step (median over the {N - 1} steps after the first), "
          "throughput, exposed communication (`comm_exposed_ms`, median; the time blocked in the gradient sync after "
          "backward), the log's per-rank memory total (the app's own accounting: parameters, gradients, optimizer, "
          "activations) and the peak RSS of the job's largest process (wait4 `ru_maxrss`, measured).", "",
          "## Machine", ""]
    md += [f"- {k}: {v}" for k, v in machine.items()]
    md += [f"- every job: a Slurm job step `srun --mpi={args.srun_mpi} --kill-on-bad-exit=1 -N <nodes> -n R -c "
           f"{args.threads}` on ceil(R / {S_TPN}) node(s) of the allocation, {args.threads} OpenMP threads per rank at "
           "every R: each rank has its own cores (cores(R) = R x threads), so the textbook and per-core efficiencies "
           "coincide and their ideal is 1; peak RSS is not measured (wait4 sees srun)", ""] if SRUN else [
           f"- every job: `mpirun -np R --oversubscribe --bind-to none`, OMP_NUM_THREADS = max(1, {C} // R): the "
           f"ranks share the {C} cores; R > {C} is oversubscribed ({C} cores run R single-threaded ranks), so its "
           "efficiencies mostly measure the oversubscription, not the parallel algorithm", ""]
    md += [
           "## Command", "", "```sh", command, "```", "",
           f"{len(rows)} configurations" + (f" and {len(calib_rows)} calibration configuration(s)" if calib_rows
                                            else "") + f" x {REPEAT} run(s) in {total_s:.0f} s, {N} steps each; "
           f"of the {REPEAT} "
           "runs of a configuration, made round-robin over the configurations, the fastest is kept, the one least "
           "disturbed by load from outside the job (all in the CSV's `ms_step_runs`: on this VM the same job "
           "varies by up to 60 % in spells of seconds to minutes). Every run adds "
           + ", ".join(f"`--set {s}`" for s in QUIET["gpt"]) + " (train_gpt) and "
           + ", ".join(f"`--set {s}`" for s in QUIET["resnet"]) + " (train_resnet), then `--set train.steps`, "
           "`train.global_batch`, `train.micro_batch`; each run directory holds its exact `command.txt` (also in the "
           "CSV).", "", "Batches:", ""] + [f"- {n}" for n in notes] + [
           "", "## Efficiency definitions", "",
           "- textbook (as specified): strong E = T(1) / (R T(R)), weak E = T(1) / T(R), T = median ms/step.",
           "- per-core: E_c = (throughput(R) / cores(R)) / (throughput(1) / cores(1)), cores(R) = min(C, R x threads). "
           + ("Under srun every rank has its own cores at every R, so E_c equals the textbook E for strong scaling "
              "and both have the ideal 1 (the 'ceiling' column is 1)." if SRUN else
              f"Here every R <= {C} uses all {C} cores (R = 1 runs {C} threads), so a perfect code keeps the step "
              "time constant under strong scaling and doubles it under weak scaling from R = 1 to 2: E_c = 1, while "
              f"the textbook E is capped at cores(R) / (R cores(1)) = 1/R (the 'ceiling' column of the CSV, the "
              "dotted line of the plot). E_c is the number to read; the textbook E is given because the scaling "
              "validation specifies it."), ""]
    for app in args.apps:
        md += [f"## train_{app} ({os.path.relpath(args.gpt_deck if app == 'gpt' else args.resnet_deck, REPO)})", "",
               table(app), ""]
    if calib_rows:
        md += ["## Calibration runs (R = 1 at the per-rank thread counts of the R > 1 points)", "",
               f"Not scaling points (CSV `role` = `calibration`, no efficiencies, not plotted): R = 1 runs at the "
               f"thread count the R > 1 points run per rank, fewer than the {threads(1)} of the R = 1 scaling point, "
               f"at the weak mode's per-rank batch, as max(R, {C} / t) independent copies at once (the cores as busy "
               "as at the points they calibrate, oversubscribed as they are; ms/step is the slowest copy's, as a synchronous step waits for its slowest rank; "
               "`copies` and `ms_step_copies` in the CSV). "
               "`validation/perf_model.py` takes the compute time of a point at t threads per rank from the run at t "
               "threads, since per-core throughput changes with the thread count and with the neighbours' load (the "
               "last column: below 1 when the threaded kernels lose efficiency).", ""]
        for app in args.apps:
            if any(R["app"] == app for R in calib_rows):
                md += [f"train_{app}:", "", calib_table(app), ""]
    md += ["## Plot", ""]
    md += [f"![scaling]({os.path.basename(png_path)})", "",
           "Top: throughput vs R (strong: fixed global batch; weak: R x per-rank batch). Bottom: per-core efficiency "
           "(solid), textbook efficiency (dashed) and its ceiling at fixed cores (dotted)."] if png_path else [plot_note]
    expected = (f"Expected: each rank runs on its own {args.threads} core(s) of the allocation, so strong scaling "
                "divides the per-rank work by R and adds the gradient allreduce (overlapped with backward), and weak "
                "scaling keeps the per-rank work and adds the allreduce: efficiencies near 1 while the step is "
                "compute-bound, lower as the allreduce's exposed part and the smaller per-rank GEMMs grow. On an "
                "oversubscribed test allocation (Slurm claiming more CPUs than the node has) the numbers measure the "
                "oversubscription instead.") if SRUN else (f"Expected: with {C} cores, R = 2 at 1 thread per rank against R = 1 at 2 threads uses the same cores, so "
           "its per-core efficiency is near 1 when the step is compute-bound, the 1-thread kernels are as efficient "
           "per core as the 2-thread ones and the DP allreduce is cheap (shared memory, a few MiB of gradients, "
           "overlapped with backward); below 1 when the 2-thread kernels already scaled well and the allreduce or the "
           "smaller per-rank GEMMs cost something, above 1 when the OpenMP threading of a kernel was worse than two "
           f"independent processes. R = 4 > {C} cores is oversubscribed: two single-threaded ranks per core "
           "time-slice, the gradient allreduce waits for the descheduled peer, and exposed communication grows; "
           "its numbers are an oversubscription measurement.")
    md += ["", "## Reading", "", expected, "", "Measured:", ""] + reading() + [
           "", f"One row per run (`kept` marks the median run of each configuration) with every recorded field: `{os.path.basename(csv_path)}`. Run directories (logs, "
           f"metrics.jsonl, command.txt): `{os.path.relpath(out_root, REPO)}/`.", "",
           "Verdict: VALID when every run exited 0 and produced its PERFORMANCE line, memory line and "
           "metrics.jsonl records (a scaling campaign has no pass/fail on speed).", "", final]
    with open(args.report, "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"report: {args.report}")
print(f"csv: {csv_path}" + (f", plot: {png_path}" if png_path else ""))
print(f"{len(all_runs)} runs ({len(rows)} configurations" + (f", {len(calib_rows)} calibration" if calib_rows else "")
      + f") in {total_s:.0f} s")
print(final)
sys.exit(0 if final == "VALID" else 1)
