#!/usr/bin/python3
"""Opens a checkpoint's index.h5 with h5py (serial HDF5, another working directory) and checks that every
tensor of the test model (tests/unit/ckpt/ckpt_test_model.hpp) reads whole through the virtual datasets
with the expected values, and that the root attributes are there. Prints VALID, or FAILED: <what> (exit 1).

usage: check_index_h5py.py ROOT   (the ROOT given to ckpt_make_test_checkpoint)
"""
import os
import sys

import h5py
import numpy as np

# name, shape, dtype, salt: mirror of test_model() in ckpt_test_model.hpp
TENSORS = [
    ("model/h.0.attn.qkv.weight", (12, 10), np.float32, 1),
    ("model/h.0.block4d", (3, 4, 5, 6), np.float32, 2),
    ("model/wte", (9, 7), np.float32, 3),
    ("model/ln_f.bias", (7,), np.float32, 4),
    ("optim/exp_avg/model/h.0.block4d", (3, 4, 5, 6), np.float64, 5),
    ("optim/exp_avg/model/wte", (9, 7), np.float64, 6),
    ("state/step_counts", (5, 3), np.int64, 7),
    ("state/seq", (11,), np.int32, 8),
    ("state/loader", (13,), np.uint8, 9),
]


def expected(shape, dtype, salt):
    k = 7 * np.arange(int(np.prod(shape)), dtype=np.int64) + salt
    if dtype in (np.float32, np.float64):
        v = (k % 1000).astype(dtype) / dtype(8)
    elif dtype == np.uint8:
        v = (k % 251).astype(dtype)
    else:
        v = (k % 1000).astype(dtype)
    return v.reshape(shape)


def main():
    root = os.path.abspath(sys.argv[1])
    ckpt = os.path.join(root, "checkpoints")
    with open(os.path.join(ckpt, "latest")) as f:
        step_dir = os.path.join(ckpt, f.read().strip())
    index = os.path.join(step_dir, "index.h5")
    os.chdir("/")  # the shard paths must resolve relative to index.h5, not to the working directory
    failures = []
    with h5py.File(index, "r") as f:
        if f.attrs["format_version"] != 1:
            failures.append(f"format_version is {f.attrs['format_version']}, should be 1")
        if f.attrs["step"] != 7:
            failures.append(f"step is {f.attrs['step']}, should be 7")
        deck = f.attrs["deck"]
        deck = deck if isinstance(deck, str) else deck.decode()
        if len(deck.encode()) < 100000 or "ünïcode" not in deck:
            failures.append(f"deck attribute has {len(deck.encode())} UTF-8 bytes, should be >= 100000 with 'ünïcode'")
        for name, shape, dtype, salt in TENSORS:
            d = f[name]
            if not d.is_virtual:
                failures.append(f"{name} is not a virtual dataset")
            got = d[()]
            want = expected(shape, dtype, salt)
            if got.shape != want.shape or got.dtype != want.dtype:
                failures.append(f"{name}: {got.dtype}{got.shape}, should be {want.dtype}{want.shape}")
            elif not np.array_equal(got, want):
                bad = int(np.sum(got != want))
                failures.append(f"{name}: {bad} of {want.size} elements differ")
            else:
                print(f"  {name:36s} {str(got.dtype):8s} {str(got.shape):16s} ok")
    if failures:
        print("FAILED: " + "; ".join(failures))
        return 1
    print(f"VALID ({len(TENSORS)} tensors read whole through {index})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
