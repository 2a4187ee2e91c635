#!/usr/bin/python3
"""The layout planner end to end (`APP DECK --plan WORLD --auto --machine M --json`, docs/parallelism.md "Choosing a
layout"): the JSON lines' keys, ranks 1..K in predicted order, the deck's own layout marked, and the best layout's
`--set` arguments taken at their word: with them the plain `--plan WORLD --json` plans the memory the planner
reported (to the byte), and the planner, asked again, names that layout as the deck's and ranks it first.

usage: check_auto_plan.py APP DECK WORLD MACHINE TOP [--set k=v ...]
Prints `VALID: auto plan` or `FAILED: <what>` (exit 1)."""
import json
import subprocess
import sys

app, deck, world, machine, top = sys.argv[1:6]
extra = sys.argv[6:]
KEYS = ["rank", "position", "deck", "app", "world", "machine", "layout", "pred_ms", "throughput", "unit", "mfu",
        "mem_peak_bytes", "memory", "fits", "reason", "set", "time_ms", "work"]
LAYOUT = ["dp", "tp", "pp", "v", "sp", "zero", "zero_group", "recompute", "micro_batch", "grad_dtype"]
failures = []


def run(args):
    r = subprocess.run([app, deck, "--plan", world] + args, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-3000:])
        print(f"FAILED: {' '.join(args)} exited {r.returncode}")
        sys.exit(1)
    return r.stdout


def objects(out):
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


out = run(["--auto", "--machine", machine, "--json", "--top", top] + extra)
print(out)
objs = objects(out)
# the deck's own layout comes last when it is not among those shown (its rank, if any, beyond K)
shown = objs[:-1] if objs and objs[-1]["deck"] and (objs[-1]["rank"] or 0) > int(top) else objs
ranked = [o for o in shown if o["rank"] is not None]
if len(ranked) != int(top):
    failures.append(f"{len(ranked)} ranked objects, expected {top}")
for o in objs:
    if list(o) != KEYS:
        failures.append(f"keys {list(o)} != {KEYS}")
    if list(o["layout"]) != LAYOUT:
        failures.append(f"layout keys {list(o['layout'])}")
if [o["rank"] for o in ranked] != list(range(1, len(ranked) + 1)):
    failures.append("ranks are not 1..K in order")
preds = [o["pred_ms"] for o in shown]
if preds != sorted(preds):
    failures.append("the candidates are not in predicted order")
if sum(o["deck"] for o in objs) != 1:
    failures.append("the deck's own layout is not marked once")
if any(o["fits"] and o["mem_peak_bytes"] is None for o in objs):
    failures.append("a fitting candidate without its memory")
best = ranked[0] if ranked else None
if best:
    sets = [a for kv in best["set"] for a in ("--set", kv)]
    plan = [o for o in objects(run(["--json"] + extra + sets)) if "plan" in o]
    peak = plan[0]["plan"]["memory"]["peak"] if plan else None
    if peak != best["memory"]["peak"]:
        failures.append(f"the best layout's --plan peak {peak} != the planner's {best['memory']['peak']}")
    again = objects(run(["--auto", "--machine", machine, "--json", "--top", "1"] + extra + sets))
    deck_obj = [o for o in again if o["deck"]]
    if not deck_obj or deck_obj[0]["rank"] != 1 or deck_obj[0]["layout"] != best["layout"]:
        failures.append("planned again with the best's --set arguments, the deck's layout is not rank 1")
    elif abs(deck_obj[0]["pred_ms"] - best["pred_ms"]) > 1e-9 * best["pred_ms"]:
        failures.append("the same layout predicted differently")
print("VALID: auto plan" if not failures else "FAILED: " + "; ".join(failures))
sys.exit(1 if failures else 0)
