#!/usr/bin/python3
"""Checks that README.md and docs/*.md name files and functions where they are.

  scripts/check_docs.py [ROOT]      exit 0 and "VALID: ..." when every reference holds, else 1 and one line each
  scripts/check_docs.py --self-test the check fails on a planted missing file and a function named in the wrong file

What is checked, in every `backticked` token of the markdown:
  - a path under one of the repository's top-level folders (lib/, apps/, tests/, validation/, scripts/, inputs/,
    slurm/, cmake/, docs/, .ci/), relative to the root or to the document's folder, exists (globs and {a,b} forms are
    skipped);
  - a bare source file name (name.cpp, .hpp, .cu, .cuh, .py, .sh) is the name of some file of the repository;
  - a function or type named with its file, in the three forms the docs use: `file`, `name` / `name` (`file`) /
    `file:name`, occurs in that file as an identifier (for A::B, the last part), so that a function moved to another
    file fails the check until the docs follow it;
  - README.md stays a front page: at most README_MAX_LINES lines and README_MAX_BYTES bytes (the reference lives in
    docs/).
"""
import os
import re
import subprocess
import sys
import tempfile

ROOTS = ("lib", "apps", "tests", "validation", "scripts", "inputs", "slurm", "cmake", "docs", ".ci")
CODE = r"[A-Za-z0-9_./-]+\.(?:cpp|hpp|cu|cuh|py|sh)"
NAME = r"[A-Za-z_][A-Za-z0-9_:]*"
PATH_RE = re.compile(r"`((?:%s)/[A-Za-z0-9_./{},*-]*)`" % "|".join(re.escape(r) for r in ROOTS))
BARE_RE = re.compile(r"`(%s)`" % CODE)
PAIR_RES = (re.compile(r"`(%s)`, `(%s)`(?! in\b)" % (CODE, NAME)),   # `file`, `name` (not "`name` in `file2`")
            re.compile(r"`(%s)` \(`(%s)`\)" % (NAME, CODE)),          # `name` (`file`)
            re.compile(r"`(%s):(%s)`" % (CODE, NAME)),                # `file:name`
            re.compile(r"`(%s)` in `(%s)`" % (NAME, CODE)))           # `name` in `file`
README_MAX_LINES, README_MAX_BYTES = 250, 20 * 1024
# Files the docs name that the repository does not hold, because a script writes them (name: the writer).
GENERATED = {"usercustomize.py": "scripts/test_isa_variant.sh"}


def repo_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True, check=True).stdout
        return [f for f in out.splitlines() if f]
    except (OSError, subprocess.CalledProcessError):  # a copy without .git
        files = []
        for d, _, names in os.walk(root):
            if "/build" in d or "/.git" in d:
                continue
            files += [os.path.relpath(os.path.join(d, n), root) for n in names]
        return files


def resolve(root, doc_dir, path, by_name):
    """The repository file a reference names: the path from the root or the document's folder, else a unique file
    whose path ends with it (`cpu/cpu_conv_dnnl.cpp`, `cuda_gpt.cu`); None when there is none."""
    for base in (root, doc_dir):
        p = os.path.normpath(os.path.join(base, path))
        if os.path.exists(p):
            return p
    hits = [f for f in by_name.get(os.path.basename(path), []) if f == path or f.endswith("/" + path)]
    return os.path.join(root, hits[0]) if hits else None


def check(root, docs):
    files = repo_files(root)
    by_name = {}
    for f in files:
        by_name.setdefault(os.path.basename(f), []).append(f)
    problems, refs = [], 0
    for doc in docs:
        doc_dir = os.path.dirname(doc)
        rel = os.path.relpath(doc, root)
        for i, line in enumerate(open(doc, errors="replace"), 1):
            for m in PATH_RE.finditer(line):
                p = m.group(1).rstrip(".,")
                refs += 1
                if any(c in p for c in "*{}") or p.endswith("/"):
                    continue
                if resolve(root, doc_dir, p, by_name) is None:
                    problems.append(f"{rel}:{i}: `{p}` does not exist")
            for m in BARE_RE.finditer(line):
                p = m.group(1)
                if "/" in p:
                    continue
                refs += 1
                if p not in by_name and p not in GENERATED:
                    problems.append(f"{rel}:{i}: no file of the repository is named `{p}`")
            for k, pair in enumerate(PAIR_RES):
                for m in pair.finditer(line):
                    f, name = (m.group(2), m.group(1)) if k in (1, 3) else (m.group(1), m.group(2))
                    refs += 1
                    path = resolve(root, doc_dir, f, by_name)
                    if path is None:
                        problems.append(f"{rel}:{i}: `{f}` (said to hold `{name}`) does not exist")
                        continue
                    ident = name.split("::")[-1]
                    text = open(path, errors="replace").read()
                    if not re.search(r"\b%s\b" % re.escape(ident), text):
                        problems.append(f"{rel}:{i}: `{name}` is not in `{f}`")
    return refs, problems


def readme_size_problems(path):
    """[problem] when the README is longer than README_MAX_LINES lines or README_MAX_BYTES bytes."""
    with open(path, "rb") as f:
        data = f.read()
    lines = data.count(b"\n")
    if lines <= README_MAX_LINES and len(data) <= README_MAX_BYTES:
        return []
    return [f"{os.path.basename(path)}: {lines} lines, {len(data)} bytes: a front page holds at most {README_MAX_LINES} "
            f"lines and {README_MAX_BYTES} bytes; move the reference into docs/ (apps.md, decks.md, building.md, ...)"]


def main(argv):
    if argv[1:2] == ["--self-test"]:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        with tempfile.TemporaryDirectory() as d:
            good = os.path.join(d, "good.md")
            with open(good, "w") as f:
                f.write("`scripts/build.sh` and `apps_only` (`scripts/build.sh`), `build.sh`, `usercustomize.py`,"
                        " `gen` in `scripts/build.sh`, `scripts/build.sh`, `ranks` in `scripts/demo.sh`\n")
            bad = os.path.join(d, "bad.md")
            with open(bad, "w") as f:
                f.write("`scripts/no_such_file.sh`; `resolve` (`scripts/build.sh`); `scripts/demo.sh:apps_only`;"
                        " `missing_file.cpp`; `prepare_text` in `scripts/setup.sh`\n")
            _, p_good = check(root, [good])
            _, p_bad = check(root, [bad])
            long_readme = os.path.join(d, "README.md")
            with open(long_readme, "w") as f:
                f.write("line\n" * (README_MAX_LINES + 1))
            p_long = readme_size_problems(long_readme) + readme_size_problems(good)
        ok = not p_good and len(p_bad) == 5 and len(p_long) == 1
        print(("VALID" if ok else "FAILED") + f": self-test (good: {p_good or 'no problems'}; planted: {len(p_bad)} of 5"
              f" found: {p_bad}; a README of {README_MAX_LINES + 1} lines: {p_long})")
        return 0 if ok else 1
    root = os.path.abspath(argv[1]) if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    docs = [os.path.join(root, "README.md")] + sorted(
        os.path.join(root, "docs", f) for f in os.listdir(os.path.join(root, "docs")) if f.endswith(".md"))
    refs, problems = check(root, docs)
    problems += readme_size_problems(os.path.join(root, "README.md"))
    for p in problems:
        print(p)
    print(("VALID" if not problems else "FAILED") + f": {refs} file and function references in README.md and "
          f"docs/ ({len(problems)} wrong)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
