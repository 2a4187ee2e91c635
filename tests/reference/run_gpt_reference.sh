#!/usr/bin/env bash
# ctest driver of the PyTorch cross-check: train_gpt writes a reference dump of N steps of a deck, then
# gpt_reference.py replays them in PyTorch and compares losses and step-1 gradients.
# usage: run_gpt_reference.sh TRAIN_GPT DECK WORKDIR [--set k=v ...]
set -euo pipefail
exe="$1"; deck="$2"; work="$3"; shift 3
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
rm -rf "$work"; mkdir -p "$work"
"$exe" "$deck" --out "$work/run" --dump "$work/reference.h5" --set sample.tokens=0 "$@" > "$work/train.out"
/usr/bin/python3 "$here/gpt_reference.py" "$work/reference.h5"
