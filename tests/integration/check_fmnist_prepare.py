#!/usr/bin/env python3
"""prepare_images on the real Fashion-MNIST package files (dataset-fashion-mnist): counts, shapes, dtypes,
attributes, the 6000/1000-per-class label histograms, the subset being the head of the training set, and
pixels equal to the IDX files' bytes.

    check_fmnist_prepare.py PREPARE_IMAGES OUT_DIR [SRC]

Exit 77 (ctest SKIP_RETURN_CODE) when the package is absent. Prints "VALID: fmnist_prepare" on success.
"""
import gzip
import os
import shutil
import subprocess
import sys

SRC_DEFAULT = "/usr/share/datasets/fashion-mnist"


def fail(msg):
    print(f"FAILED: {msg}")
    sys.exit(1)


def main():
    exe, out = sys.argv[1], sys.argv[2]
    src = sys.argv[3] if len(sys.argv) > 3 else SRC_DEFAULT
    if not os.path.isfile(os.path.join(src, "train-images-idx3-ubyte.gz")):
        print(f"SKIPPED: {src} has no Fashion-MNIST IDX files: install dataset-fashion-mnist (scripts/setup.sh)")
        sys.exit(77)
    import h5py
    import numpy as np

    shutil.rmtree(out, ignore_errors=True)
    r = subprocess.run([exe, "fashion-mnist", "--src", src, "--out-dir", out, "--subset", "10000"],
                       capture_output=True, text=True, timeout=120)
    print(r.stdout, r.stderr)
    if r.returncode != 0:
        fail(f"prepare_images exited {r.returncode}")

    def idx(stem, offset):
        with gzip.open(os.path.join(src, stem + ".gz"), "rb") as f:
            return np.frombuffer(f.read()[offset:], dtype=np.uint8)

    for name, n, per_class, stem in [("fmnist_train.h5", 60000, 6000, "train"),
                                     ("fmnist_test.h5", 10000, 1000, "t10k"),
                                     ("fmnist_train_10k.h5", 10000, None, "train")]:
        path = os.path.join(out, name)
        with h5py.File(path, "r") as f:
            im, lb = f["images"], f["labels"]
            if im.shape != (n, 1, 28, 28) or im.dtype != np.uint8:
                fail(f"{name}: images {im.shape} {im.dtype}, expected ({n}, 1, 28, 28) uint8")
            if lb.shape != (n,) or lb.dtype != np.int32:
                fail(f"{name}: labels {lb.shape} {lb.dtype}, expected ({n},) int32")
            if int(f.attrs["num_classes"]) != 10:
                fail(f"{name}: num_classes {f.attrs['num_classes']}")
            labels = lb[...]
            hist = np.bincount(labels, minlength=10)
            if labels.min() < 0 or labels.max() > 9:
                fail(f"{name}: labels outside 0..9")
            if per_class is not None and not (hist == per_class).all():
                fail(f"{name}: label histogram {hist.tolist()}, expected {per_class} per class")
            want_px = idx(f"{stem}-images-idx3-ubyte", 16).reshape(-1, 1, 28, 28)[:n]
            want_lb = idx(f"{stem}-labels-idx1-ubyte", 8)[:n]
            if not np.array_equal(im[...], want_px):
                fail(f"{name}: pixels differ from the IDX file")
            if not np.array_equal(labels, want_lb.astype(np.int32)):
                fail(f"{name}: labels differ from the IDX file")
            print(f"{name}: {n} images, histogram {hist.tolist()}, name {f.attrs['name']!r}")
    print("VALID: fmnist_prepare")


if __name__ == "__main__":
    main()
