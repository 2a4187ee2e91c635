"""The trainer's log line for each checkpoint save (lib/train/checkpoint/saver.cpp, CheckpointSaver::report), parsed
for the checkpoint benchmarks (validation/bench_ckpt_async.py, validation/bench_ckpt_staging.py). Standard library
only (it also runs from the GPU bundle's environment).

  checkpoint (every) step 5 -> DIR | 1.38 GiB in 0.42 s (3361.0 MiB/s) | background, during steps 6..9: step loop
  stalled 0.114 s, write 0.31 s | rank 0: snapshot 0.114 s, crc 0.000, write 0.201, fsync 0.080, manifests 0.001, ...
(one line; "foreground" or "background, no step overlapped it" in place of "background, during steps a..b")."""
import re

SAVE = re.compile(r"checkpoint \((\w+)\) step (\d+) -> \S+ \| ([0-9.]+) (B|KiB|MiB|GiB) in ([0-9.]+) s "
                  r"\([0-9.]+ MiB/s\) \| (foreground|background, (?:during steps (\d+)\.\.(\d+)|no step "
                  r"overlapped it)): step loop stalled ([0-9.]+) s, write ([0-9.]+) s \| rank 0: snapshot "
                  r"([0-9.]+) s([^\n]*)")
UNIT = {"B": 2**-20, "KiB": 2**-10, "MiB": 1.0, "GiB": 1024.0}
PHASE = re.compile(r", (\w+) ([0-9.]+)")


def saves(log):
    """Every save line of a run's output, in order, as dicts:
      why       the cadence's reason ("every", "end", a signal name, ...)
      step      the step saved
      mib       the checkpoint's size in MiB
      total_s   snapshot + write (the line's "in X s")
      mode      "foreground" or "background"
      overlap   (first, last) step that ran beside a background write, or None
      stall     the step loop's stall: the snapshot, any wait for the previous save, and (foreground) the write
      write     the write's duration (snapshot excluded)
      snapshot  rank 0's snapshot: device-to-host staging copies (and the replica check), seconds
      phases    rank 0's write phases {"crc": s, "write": s, "fsync": s, "manifests": s, ...}"""
    out = []
    for m in SAVE.finditer(log):
        a, b = m.group(7), m.group(8)
        out.append(dict(why=m.group(1), step=int(m.group(2)), mib=float(m.group(3)) * UNIT[m.group(4)],
                        total_s=float(m.group(5)), mode=m.group(6).split(",")[0],
                        overlap=(int(a), int(b)) if a else None, stall=float(m.group(9)), write=float(m.group(10)),
                        snapshot=float(m.group(11)), phases={k: float(v) for k, v in PHASE.findall(m.group(12))}))
    return out


def background_costs(log, ms, base_ms):
    """Every background save of a run's log with what it cost the step loop: the saves() fields plus
      steps  "a..b", the steps that ran beside the write ("-" when none)
      extra  the seconds those steps took beyond base_ms (the same run's median step time without checkpoints),
             from ms = {step: milliseconds} (metrics.jsonl)
      over   (stall - snapshot + extra) / write: the share of the write the step loop paid for"""
    out = []
    for sv in saves(log):
        if sv["mode"] != "background":
            continue
        a, b = sv["overlap"] or (None, None)
        extra = sum(ms[s] - base_ms for s in range(a, b + 1) if s in ms) / 1e3 if a else 0.0
        out.append(dict(sv, steps=f"{a}..{b}" if a else "-", extra=extra,
                        over=(sv["stall"] - sv["snapshot"] + extra) / sv["write"]))
    return out
