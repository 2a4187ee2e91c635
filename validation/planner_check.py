#!/usr/bin/python3
"""Layout planner check: does `train_gpt DECK --plan WORLD --auto --machine M` rank layouts as they run on this CPU?

For each deck (--decks, default inputs/gpt_tiny.toml inputs/bench_gpt.toml) and world (--worlds, default 4 8):
  1. plan:    `build/apps/train_gpt DECK --plan W --auto --machine M --top 0 --json [--set ...]`, every candidate that
              fits, in predicted order;
  2. choose:  the planner's first --top (8; with --min-gap F each at least F above the previous one in predicted
              time, skipping near-ties) and --random (4) more drawn (seeded, --seed) from the rest whose predicted
              time is at most --max-ratio (4) x the best: the rest in predicted order cut into --random equal parts,
              one drawn from each, so that the slowest part is drawn from too; when the chosen ones then span less
              than 2x of predicted time and the rest has candidates at >= 2x the best, the last draw is among those;
  3. run:     each chosen layout `mpirun -np W --oversubscribe --bind-to core:overload-allowed --map-by core
              build/apps/train_gpt DECK <its "set" arguments as --set> --set train.steps=30 --set train.eval_every=0
              --set checkpoint.every=0 --set checkpoint.at_end=false --set sample.tokens=0 --out DIR`
              (OMP_NUM_THREADS=1: the ranks share the cores as the machine file's shared_slowdown says; bound
              round-robin to them: planner_jobs.mpirun), --repeats (3) times in round-robin order over every chosen
              layout of every (deck, world), never twice in a row; a run's time is the median step time of
              steps 6..--steps in its metrics.jsonl, a layout's measured time the fastest of its runs (the one least
              disturbed by outside load);
  4. judge:   per (deck, world) the Spearman rank correlation of predicted and measured time over the chosen layouts
              (>= --min-spearman, 0.7) and the planner's first choice measured within --first-tolerance (10%) of the
              fastest measured one. VALID when every (deck, world) passes and every chosen layout ran.
The expected duration (the planner's predicted times, the steps and a launch cost per run) is printed before anything
runs; more than --budget-min (40) minutes stops there. After each round, a next round that would end past the budget is
not started (the report says how many rounds ran). Run it alone on the machine: timing is noisy when shared.

usage: validation/planner_check.py [--decks D...] [--worlds W...] [--machine this_cpu] [--set KEY=VALUE]...
                                   [--steps 30] [--repeats 3] [--budget-min 40] [--csv F] [--report F.md] [--dry-run]
       validation/planner_check.py --verify CSV [--against REPORT.md]
  --set       appended to every plan and run command (e.g. train.global_batch=16 where a deck's batch gives too few
              layouts); recorded in the CSV's deck_sets column
  --min-gap   e.g. 0.02: the top ones spaced in predicted time (the planner's first ones are often near-ties that
              differ by zero stage, recompute or gradient dtype only, whose measured order is run-to-run noise)
  --dry-run   plan and choose, print the chosen candidates, the commands and the expected duration; run nothing
  --verify    recompute the verdict from a CSV this script wrote, without running anything; with --against, check
              that it is the verdict the committed report records (the ctest `validation_planner_check_verify`)
Writes the CSV (default validation/results/planner_check_cpu.csv: one row per (deck, world, chosen layout): the
planner's rank, how it was chosen, the layout, the predicted and each run's measured ms, the measured ms, the command)
and the markdown report (default validation/results/planner_check_cpu.md); prints the tables and last
`VALID: ...` or `FAILED: <what>` (exit 1)."""
import argparse
import csv
import math
import os
import random
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from campaign import REPO, machine_info  # noqa: E402
from planner_jobs import (ENV, WARMUP_STEPS, failure_tail, mpirun, plan_objects, preflight, rel,  # noqa: E402
                          run_together, set_args, show, step_ms)

RESULTS = os.path.join(REPO, "validation", "results")
ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--verify", metavar="CSV", help="judge this CSV, run nothing")
ap.add_argument("--against", metavar="REPORT.md",
                help="with --verify: the verdict must equal the report's last line (CONSISTENT, exit 0)")
ap.add_argument("--decks", nargs="+", default=[os.path.join(REPO, "inputs", d) for d in ("gpt_tiny.toml",
                                                                                         "bench_gpt.toml")])
ap.add_argument("--worlds", type=int, nargs="+", default=[4, 8])
ap.add_argument("--machine", default="this_cpu", help="NAME (inputs/machines/NAME.toml) or a file")
ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
ap.add_argument("--build", default=os.path.join(REPO, "build"))
ap.add_argument("--top", type=int, default=8, help="the planner's best this many are run")
ap.add_argument("--random", type=int, default=4, help="and this many drawn from the rest")
ap.add_argument("--max-ratio", type=float, default=4.0,
                help="draw only among predicted times up to this multiple of the best (keeps the runs in budget)")
ap.add_argument("--min-gap", type=float, default=0.0,
                help="take the top ones at least this fraction apart in predicted time (e.g. 0.02; default 0: the "
                "planner's first --top as they come, often near-ties of zero stage, recompute, grad dtype)")
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--steps", type=int, default=30)
ap.add_argument("--repeats", type=int, default=3)
ap.add_argument("--budget-min", type=float, default=40)
ap.add_argument("--min-spearman", type=float, default=0.7)
ap.add_argument("--first-tolerance", type=float, default=0.10)
ap.add_argument("--timeout", type=float, default=600, help="seconds per run before it is killed and fails")
ap.add_argument("--out", default="/tmp/planner_check", help="run directories (wiped first)")
ap.add_argument("--csv", default=os.path.join(RESULTS, "planner_check_cpu.csv"))
ap.add_argument("--report", default=os.path.join(RESULTS, "planner_check_cpu.md"))
ap.add_argument("--dry-run", action="store_true")
args = ap.parse_args()

LAYOUT_KEYS = ("dp", "tp", "pp", "v", "sp", "zero", "zero_group", "recompute", "micro_batch", "grad_dtype")
FIXED_SETS = ["train.eval_every=0", "checkpoint.every=0", "checkpoint.at_end=false", "sample.tokens=0"]


# ------------------------------------------------------------------------------------------------------- judging
def avg_ranks(xs):
    """Ranks 1..n of xs, ties given their average rank."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(x, y):
    """Spearman's rank correlation (the Pearson correlation of the average ranks); nan when either side is constant."""
    rx, ry = avg_ranks(x), avg_ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else float("nan")


def num(v):
    return float(v) if v not in (None, "") else None


def rep_columns(fieldnames):
    return [k for k in fieldnames if k.startswith("run") and k.endswith("_ms")]


def judge(rows, fieldnames):
    """Per (deck, world) in order of appearance: dict(deck, world, n, rho, first_ms, best_ms, ratio, problems);
    and the failures (empty: VALID). A row's meas_ms must be the fastest of its run columns (a CSV edited by hand, or
    written by another rule, is refused)."""
    groups, failures = {}, []
    reps = rep_columns(fieldnames)
    for r in rows:
        groups.setdefault((r["deck"], int(r["world"])), []).append(r)
    out = []
    for (deck, world), rs in groups.items():
        g = dict(deck=deck, world=world, n=len(rs), rho=float("nan"), first_ms=None, best_ms=None, ratio=None,
                 problems=[])
        for r in rs:
            runs = [num(r[k]) for k in reps if num(r[k]) is not None]
            meas = num(r["meas_ms"])
            if r.get("problem"):
                g["problems"].append(f"rank {r['rank']}: {r['problem']}")
            elif meas is None or not runs:
                g["problems"].append(f"rank {r['rank']}: not measured")
            elif abs(meas - min(runs)) > 0.01:
                g["problems"].append(f"rank {r['rank']}: meas_ms {meas} is not the fastest run {min(runs)}")
        ok = [r for r in rs if num(r["meas_ms"]) is not None]
        first = [r for r in ok if int(r["rank"]) == 1]
        if not first:
            g["problems"].append("the planner's first choice (rank 1) was not measured")
        if len(ok) < 3:
            g["problems"].append(f"{len(ok)} layouts measured, need 3 for a rank correlation")
        if not g["problems"]:
            g["rho"] = spearman([float(r["pred_ms"]) for r in ok], [float(r["meas_ms"]) for r in ok])
            g["first_ms"] = float(first[0]["meas_ms"])
            g["best_ms"] = min(float(r["meas_ms"]) for r in ok)
            g["ratio"] = g["first_ms"] / g["best_ms"]
            if not g["rho"] >= args.min_spearman:
                g["problems"].append(f"Spearman {g['rho']:.2f} < {args.min_spearman}")
            if g["ratio"] > 1 + args.first_tolerance:
                g["problems"].append(f"first choice {g['first_ms']:.1f} ms is {g['ratio']:.2f}x the fastest "
                                     f"measured {g['best_ms']:.1f} ms (limit {1 + args.first_tolerance:.2f}x)")
        failures += [f"{os.path.basename(deck)} world {world}: {p}" for p in g["problems"]]
        out.append(g)
    return out, failures


def verdict_line(groups, failures):
    if failures:
        return "FAILED: " + "; ".join(failures)
    return (f"VALID: the planner's ranking holds on {len(groups)} (deck, world) pairs: Spearman "
            + ", ".join(f"{os.path.splitext(os.path.basename(g['deck']))[0]}/w{g['world']} {g['rho']:.2f}"
                        for g in groups)
            + f" (>= {args.min_spearman}); first choice at most {max(g['ratio'] for g in groups):.3f}x the fastest "
            f"measured (<= {1 + args.first_tolerance:.2f}x)")


def group_lines(groups):
    return [f"{os.path.basename(g['deck'])} world {g['world']}: {g['n']} layouts, "
            + (f"Spearman {g['rho']:.3f}, first choice {g['first_ms']:.2f} ms, fastest {g['best_ms']:.2f} ms "
               f"({g['ratio']:.3f}x)" if g["ratio"] is not None else "not judged")
            + (" -> " + ("PASS" if not g["problems"] else "FAIL: " + "; ".join(g["problems"]))) for g in groups]


if args.verify:
    with open(args.verify, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    groups, failures = judge(rows, reader.fieldnames)
    if not rows:
        failures.append(f"{args.verify} has no rows")
    print("\n".join(group_lines(groups)))
    verdict = verdict_line(groups, failures)
    if args.against:
        # the recorded report's verdict (its last line) must be what the CSV gives: a consistency check of the
        # committed record, whatever its verdict
        with open(args.against) as f:
            recorded = [line.strip() for line in f if line.strip()][-1]
        same = recorded == verdict
        print(f"recorded in {rel(args.against)}: {recorded}")
        print(("CONSISTENT: " if same else "MISMATCH: the CSV gives ") + verdict)
        sys.exit(0 if same else 1)
    print(verdict)
    sys.exit(0 if not failures else 1)


# ---------------------------------------------------------------------------------------------- plan and choose
def fail_now(msg):
    print(f"FAILED: {msg}")
    sys.exit(1)


TRAIN_GPT = os.path.join(args.build, "apps", "train_gpt")
problem = preflight(TRAIN_GPT, need_data=not args.dry_run)
if problem:
    fail_now(problem)
# resolved as the planner resolves it (lib/train/plan/machine.cpp): a path, or a name in $HPCT_MACHINES_DIR, by
# default the source tree's inputs/machines
machine_file = args.machine if ("/" in args.machine or args.machine.endswith(".toml")) else \
    os.path.join(os.environ.get("HPCT_MACHINES_DIR") or os.path.join(REPO, "inputs", "machines"),
                 args.machine + ".toml")
if not os.path.exists(machine_file):
    fail_now(f"no machine file {machine_file} (validation/calibrate_machine.py writes this CPU's)")
if args.steps < WARMUP_STEPS + 3:
    fail_now(f"--steps {args.steps}: need at least {WARMUP_STEPS + 3} (the first {WARMUP_STEPS} are not timed)")
COMMAND = "/usr/bin/python3 validation/planner_check.py" + "".join(" " + a for a in sys.argv[1:])


def layout_text(lay):
    return (f"dp{lay['dp']} tp{lay['tp']} pp{lay['pp']} v{lay['v']} sp={str(lay['sp']).lower()} zero{lay['zero']} "
            f"zg{lay['zero_group']} rc={lay['recompute']} mb{lay['micro_batch']} grad={lay['grad_dtype']}")


def choose(fitting, rng):
    """(candidate, how) pairs: the planner's first args.top, then args.random drawn from the rest (see the module
    docstring, step 2), and a note: how close the first ones are predicted (within the run-to-run noise their
    measured order is a draw), and where the rule could not be met."""
    top, last = [], 0  # last: the index in fitting after the last top pick
    for i, o in enumerate(fitting):
        if len(top) == args.top:
            break
        if not top or o["pred_ms"] >= top[-1]["pred_ms"] * (1 + args.min_gap):
            top.append(o)
            last = i + 1
    best = fitting[0]["pred_ms"]
    rest = [o for o in fitting[last:] if o["pred_ms"] <= args.max_ratio * best]
    if len(rest) <= args.random:
        drawn = list(rest)
    else:
        cut = [round(i * len(rest) / args.random) for i in range(args.random + 1)]
        drawn = [rng.choice(rest[cut[i]:cut[i + 1]]) for i in range(args.random)]
    picked = top + drawn
    slow = [o for o in rest if o["pred_ms"] >= 2 * best and o not in drawn]
    if drawn and max(o["pred_ms"] for o in picked) < 2 * best and slow:
        drawn[-1] = rng.choice(slow)
        picked = top + drawn
    span = max(o["pred_ms"] for o in picked) / best
    note = [f"the first {len(top)} predicted within {top[-1]['pred_ms'] / best - 1:.1%} of the best, the chosen "
            f"{len(picked)} span {span:.2f}x"]
    if len(picked) < args.top + args.random:
        note.append(f"only {len(picked)} fitting candidates within {args.max_ratio:g}x of the best")
    if span < 2:
        note.append("less than the 2x span asked")
    return [(o, "top") for o in top] + [(o, "random") for o in drawn], "; ".join(note)


groups = []  # dict(deck, world, plan_cmd, chosen [(obj, how)], n_fitting, n_rejected, note)
for deck in args.decks:
    deck = os.path.abspath(deck)
    for world in args.worlds:
        cmd = [TRAIN_GPT, deck, "--plan", str(world), "--auto", "--machine", args.machine, "--top", "0", "--json"] + \
            set_args(args.sets)
        objs, prob = plan_objects(cmd)
        if prob:
            fail_now(prob)
        by_rank = {}
        for o in objs:
            if o.get("fits") is True and isinstance(o.get("rank"), int):
                by_rank.setdefault(o["rank"], o)
        fitting = [by_rank[k] for k in sorted(by_rank)]
        if not fitting:
            fail_now(f"{show(cmd)}: no fitting candidate")
        rng = random.Random(f"{args.seed}:{os.path.basename(deck)}:{world}")
        chosen, note = choose(fitting, rng)
        groups.append(dict(deck=deck, world=world, plan_cmd=show(cmd), chosen=chosen, n_fitting=len(fitting),
                           n_rejected=sum(1 for o in objs if o.get("fits") is False), note=note))


def run_cmd(g, o, out):
    return mpirun(g["world"]) + [TRAIN_GPT, g["deck"]] + set_args(args.sets + o["set"] + FIXED_SETS +
                                                                  [f"train.steps={args.steps}"]) + ["--out", out]


def launch_s(world):
    """Seconds a run costs besides its steps: mpirun and MPI start, the model's set-up, the exit; rough, from the runs
    here (ranks start one after the other on few cores)."""
    return 3.0 + 0.5 * world


# the final evaluation (data.eval_sequences, forward only) costs about 3 steps of the small decks here
jobs = [(g, o, how) for g in groups for o, how in g["chosen"]]
round_s = sum(launch_s(g["world"]) + (args.steps + 3) * o["pred_ms"] / 1e3 for g, o, _ in jobs)
expected_min = args.repeats * round_s / 60
for g in groups:
    print(f"{rel(g['deck'])} world {g['world']}: {g['n_fitting']} fitting candidates "
          f"({g['n_rejected']} do not fit); plan: {g['plan_cmd']}" + f"\n  {g['note']}")
    for o, how in g["chosen"]:
        print(f"  rank {o['rank']:>4} {how:<6} pred {o['pred_ms']:9.2f} ms  {layout_text(o['layout'])}")
print(f"{len(jobs)} layouts x {args.repeats} runs of {args.steps} steps: expected ~{expected_min:.1f} min "
      f"(the planner's predicted step times; budget {args.budget_min:g} min)", flush=True)
if args.dry_run:
    for g, o, _ in jobs:
        print("OMP_NUM_THREADS=1 " + show(run_cmd(g, o, os.path.join(args.out, "DIR"))))
    print(f"dry run: {len(jobs)} layouts planned and chosen, nothing run")
    sys.exit(0)
if expected_min > args.budget_min:
    fail_now(f"expected ~{expected_min:.1f} min exceeds --budget-min {args.budget_min:g}: lower --repeats, --steps "
             "or the decks and worlds, or raise the budget")

# ----------------------------------------------------------------------------------------------------------- run
shutil.rmtree(args.out, ignore_errors=True)
os.makedirs(args.out)
for g in groups:
    g["runs"] = {o["rank"]: [] for o, _ in g["chosen"]}
    g["problems"] = {o["rank"]: "" for o, _ in g["chosen"]}
t_start = time.time()
rounds_done = 0
for rep in range(args.repeats):
    t_round = time.time()
    for g, o, how in jobs:
        out = os.path.join(args.out, f"{os.path.splitext(os.path.basename(g['deck']))[0]}_w{g['world']}_r{o['rank']}"
                                     f"_run{rep + 1}")
        cmd = run_cmd(g, o, out)
        (rc, secs), = run_together([(cmd, out)], args.timeout)
        ms, prob = step_ms(out, args.steps) if rc == 0 else (None, failure_tail(out, rc))
        g["runs"][o["rank"]].append(ms)
        if prob and not g["problems"][o["rank"]]:
            g["problems"][o["rank"]] = f"run {rep + 1}: {prob}"
        print(f"  round {rep + 1} {os.path.basename(g['deck'])} w{g['world']} rank {o['rank']:>4}: "
              + (f"{ms:8.2f} ms/step (pred {o['pred_ms']:.2f})" if ms is not None else f"FAILED {prob}")
              + f"  [{secs:.0f} s]", flush=True)
    rounds_done += 1
    elapsed, last = time.time() - t_start, time.time() - t_round
    print(f"round {rep + 1} took {last / 60:.1f} min, {elapsed / 60:.1f} min so far", flush=True)
    if rep + 1 < args.repeats and elapsed + last > args.budget_min * 60:
        print(f"stopping after {rounds_done} round(s): another would end past --budget-min {args.budget_min:g}")
        break

# ------------------------------------------------------------------------------------------------------- outputs
fieldnames = (["deck", "world", "deck_sets", "rank", "chosen"] + list(LAYOUT_KEYS) + ["pred_ms"] +
              [f"run{i + 1}_ms" for i in range(args.repeats)] + ["meas_ms", "problem", "set", "command"])
rows = []
for g in groups:
    for o, how in g["chosen"]:
        runs = g["runs"][o["rank"]]
        ok = [x for x in runs if x is not None]
        row = dict(deck=rel(g["deck"]), world=g["world"], deck_sets=" ".join(args.sets),
                   rank=o["rank"], chosen=f"top{args.top}" if how == "top" else "random",
                   pred_ms=f"{o['pred_ms']:.4f}", meas_ms=f"{min(ok):.4f}" if len(ok) == len(runs) else "",
                   problem=g["problems"][o["rank"]], set=" ".join(o["set"]),
                   command="OMP_NUM_THREADS=1 " + show(run_cmd(g, o, "DIR")))
        row.update({k: str(o["layout"][k]).lower() if isinstance(o["layout"][k], bool) else o["layout"][k]
                    for k in LAYOUT_KEYS})
        row.update({f"run{i + 1}_ms": f"{x:.4f}" if x is not None else "" for i, x in enumerate(runs)})
        rows.append(row)
os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
with open(args.csv, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=fieldnames)
    w.writeheader()
    w.writerows(rows)
with open(args.csv, newline="") as f:  # judged as --verify judges the file
    reader = csv.DictReader(f)
    judged, failures = judge(list(reader), reader.fieldnames)
verdict = verdict_line(judged, failures)

machine_header = []
with open(machine_file) as f:
    for line in f:
        if not line.startswith("#"):
            break
        machine_header.append(line[1:].strip())
L = ["# Layout planner check on this CPU: predicted against measured step times\n",
     "`validation/planner_check.py` asks the layout planner (`train_gpt DECK --plan WORLD --auto --machine M`) for "
     "every layout of each deck at each world size, runs its first choices and a seeded draw from the rest on this "
     "machine, and compares the ranking: the Spearman rank correlation of predicted and measured step time (>= "
     f"{args.min_spearman}) and the first choice's measured time against the fastest measured (within "
     f"{args.first_tolerance:.0%}).\n", "## Machine\n"]
for k, v in machine_info().items():
    L.append(f"- {k}: {v}")
L.append(f"- machine file: `{rel(machine_file)}`" +
         "".join(f"\n  - {h}" for h in machine_header))
L += ["\n## Commands\n", f"- this check: `{COMMAND}`",
      f"- environment of every run: `OMP_NUM_THREADS=1 HPCT_DATA_DIR={rel(ENV['HPCT_DATA_DIR'])}` "
      "(and Open MPI's run-as-root variables); every world above the cores is oversubscribed",
      "- plans:" + "".join(f"\n  - `{g['plan_cmd']}`" for g in groups),
      "- runs: `" + " ".join(mpirun(2)).replace(" 2 ", " W ") + " build/apps/train_gpt DECK "
      + "".join(f"--set {s} " for s in args.sets) + "<the candidate's \"set\"> "
      + "".join(f"--set {s} " for s in FIXED_SETS) + f"--set train.steps={args.steps} --out DIR`, each exact "
      f"command in the CSV (`{rel(args.csv)}`, column `command`)",
      f"- measurement: the median step time (metrics.jsonl `ms`) of steps {WARMUP_STEPS + 1}..{args.steps} of a run; "
      f"{rounds_done} round(s) of {args.repeats} asked, round-robin over every chosen layout, the fastest run kept",
      f"- choice: the planner's first {args.top}"
      + (f" (each at least {args.min_gap:.1%} above the previous in predicted time)" if args.min_gap else "")
      + f", and {args.random} drawn (seed {args.seed}) from the rest within "
      f"{args.max_ratio:g}x of the best predicted time, one from each of {args.random} consecutive parts in "
      "predicted order\n"]
for g, jg in zip(groups, judged):
    stem = rel(g["deck"])
    L.append(f"## {stem}, world {g['world']}\n")
    L.append(f"{g['n_fitting']} fitting candidates, {len(g['chosen'])} run" +
             f"; {g['note']}.\n")
    L.append("| planner rank | chosen | layout | predicted ms | " + " | ".join(f"run {i + 1} ms" for i in
                                                                           range(args.repeats)) +
             " | measured ms | measured order | / fastest measured |")
    L.append("|---:|---|---|---:|" + "---:|" * args.repeats + "---:|---:|---:|")
    mine = sorted((r for r in rows if r["deck"] == stem and r["world"] == g["world"]),
                  key=lambda r: float(r["pred_ms"]))
    measured = sorted(float(r["meas_ms"]) for r in mine if r["meas_ms"])
    best = jg["best_ms"]

    def ms(v):
        return f"{float(v):.2f}" if v else "-"
    for r in mine:
        L.append(f"| {r['rank']} | {r['chosen']} | {layout_text(r)} | {ms(r['pred_ms'])} | " +
                 " | ".join(ms(r.get(f"run{i + 1}_ms")) for i in range(args.repeats)) +
                 f" | {ms(r['meas_ms'])} | " +
                 (f"{measured.index(float(r['meas_ms'])) + 1} | {float(r['meas_ms']) / best:.3f}"
                  if r["meas_ms"] and best else "- | -") + " |")
    L.append("\n" + group_lines([jg])[0] + "\n")
L += ["## Verdict\n", verdict]
os.makedirs(os.path.dirname(os.path.abspath(args.report)), exist_ok=True)
with open(args.report, "w") as f:
    f.write("\n".join(L) + "\n")
print(f"wrote {args.csv} and {args.report}")
print("\n".join(group_lines(judged)))
print(verdict)
sys.exit(0 if not failures else 1)
