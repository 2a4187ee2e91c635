#!/usr/bin/env python3
"""Checks the kernel op table lib/kernels/ops.inc (ctest kernel_ops_table, < 1 s, no compiler).

Each generated entry, HPCT_OP_STORAGE / HPCT_OP_STORAGE_LAYOUT / HPCT_OP(name, (parameters), (arguments), (checks)),
passes (arguments) to both backends: they must be the parameters' names, in order, or a call could pass two values of
one type swapped and still compile. Also: every entry names its op once per parameter list (an overload is a new
list), and every op with a tensor shape argument has checks.

  /usr/bin/python3 scripts/check_kernel_ops.py [ROOT]     prints "VALID: ..." or the findings and "FAILED"
  /usr/bin/python3 scripts/check_kernel_ops.py --self-test   plants defects in a copy of the table, expects each found
"""
import os
import re
import sys

GENERATED = ("HPCT_OP_STORAGE_LAYOUT", "HPCT_OP_STORAGE", "HPCT_OP")
COMPOSED = ("HPCT_OP_STORAGE_COMPOSED", "HPCT_OP_COMPOSED")
SHAPE_NAMES = {"N", "C", "B", "T", "HW", "H", "W", "n", "bytes"}


def strip_comments(text):
    """The text without // and /* */ comments (whichever opens first wins: "// cpu/*.cpp" is a line comment)."""
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)


def split_top(s):
    """Splits s at the commas outside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def entries(text):
    """Yields (kind, [macro arguments], line) for each entry of the table."""
    code = strip_comments(text)
    for m in re.finditer(r"^(HPCT_OP\w*)\(", code, flags=re.M):
        kind, start = m.group(1), m.end()
        depth, i = 1, start
        while depth and i < len(code):
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            i += 1
        line = code.count("\n", 0, m.start()) + 1
        yield kind, split_top(code[start:i - 1]), line


def unparen(s):
    s = s.strip()
    if not (s.startswith("(") and s.endswith(")")):
        return None
    return s[1:-1].strip()


def param_name(p):
    p = p.split("=")[0].strip()
    ids = re.findall(r"[A-Za-z_]\w*", p)
    return ids[-1] if ids else ""


def check(text):
    findings, seen, count = [], set(), 0
    for kind, args, line in entries(text):
        if kind in GENERATED:
            if len(args) != 4:
                findings.append(f"line {line}: {kind} takes (name, (parameters), (arguments), (checks)); "
                                f"got {len(args)}")
                continue
            name, params, call, checks = args
            params_s, call_s, checks_s = unparen(params), unparen(call), unparen(checks)
            if params_s is None or call_s is None or checks_s is None:
                findings.append(f"line {line}: {name}: parameters, arguments and checks each go in parentheses")
                continue
            names = [param_name(p) for p in split_top(params_s)]
            passed = split_top(call_s)
            if names != passed:
                findings.append(f"line {line}: {name}: arguments ({', '.join(passed)}) are not the parameters' "
                                f"names in order ({', '.join(names)})")
            if SHAPE_NAMES & set(names) and not checks_s:
                findings.append(f"line {line}: {name}: takes a shape ({', '.join(sorted(SHAPE_NAMES & set(names)))}) "
                                "but has no checks")
            key = (name, params_s)
        elif kind in COMPOSED:
            if len(args) != 3:
                findings.append(f"line {line}: {kind} takes (return type, name, (parameters)); got {len(args)}")
                continue
            key = (args[1], args[2])
        else:
            findings.append(f"line {line}: unknown entry kind {kind}")
            continue
        if key in seen:
            findings.append(f"line {line}: {key[0]} is declared twice with the same parameters")
        seen.add(key)
        count += 1
    return findings, count


def self_test(text):
    plants = [
        ("swapped arguments", lambda t: t.replace("(out, inp, wte, wpe, B, T, C)", "(out, inp, wte, wpe, T, B, C)", 1)),
        ("a missing argument", lambda t: t.replace("(out, inp, wte, wpe, B, T, C)", "(out, inp, wte, wpe, B, T)", 1)),
        ("no checks on a shaped op", lambda t: t.replace("(checks::linear(op, N, C, OC)))", "())", 1)),
        ("an entry declared twice", lambda t: t + "\nHPCT_OP(scale,\n        (float* x, float s, int64_t n),\n"
                                                  "        (x, s, n),\n        (checks::count(op, n)))\n"),
    ]
    ok = True
    base, _ = check(text)
    if base:
        print("self-test: the table itself has findings:\n  " + "\n  ".join(base))
        return False
    for what, plant in plants:
        planted = plant(text)
        if planted == text:
            print(f"self-test: could not plant {what} (the table changed?)")
            ok = False
            continue
        found, _ = check(planted)
        if not found:
            print(f"self-test: {what} was not found")
            ok = False
        else:
            print(f"self-test: {what}: {found[0]}")
    return ok


def main(argv):
    selftest = "--self-test" in argv
    rest = [a for a in argv if a != "--self-test"]
    root = rest[0] if rest else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    path = os.path.join(root, "lib", "kernels", "ops.inc")
    text = open(path).read()
    if selftest:
        if self_test(text):
            print("VALID: kernel op table self-test (every planted defect found)")
            return 0
        print("FAILED")
        return 1
    findings, count = check(text)
    if findings:
        print("\n".join(findings))
        print("FAILED")
        return 1
    print(f"VALID: kernel op table ({count} entries in {os.path.relpath(path, root)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
