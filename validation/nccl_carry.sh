#!/usr/bin/env bash
# NCCL >= 2.30 for the GPU machine, carried over in pieces. Several MPI ranks share one GPU only with NCCL 2.30 or
# later and NCCL_MULTI_RANK_GPU_ENABLE=1 (docs/platform.md, "Several ranks on one GPU"); the CUDA 13.0 toolkit here
# ships NCCL 2.28.9, and the GPU machine's own NCCL had never been recorded. PyPI's nvidia-nccl-cu13 wheel holds a
# newer one, but its libnccl.so.2 is far larger than what one device call may carry (64 MiB, the working tree
# included), so it travels in pieces, one per call, and is put together there.
#
#   bash validation/nccl_carry.sh pack [--version V] [--slim ARCH] [--no-strip] [--compress auto|none|xz]
#                                      [--piece-mib N | --piece-bytes N] [--lib FILE] [--out DIR] [--cache DIR]
#       here: pip download --no-deps of nvidia-nccl-cu13 (V, default the newest) into the cache
#       (~/.cache/hpctrain/nccl-wheel; the wheel is kept, so a second pack downloads nothing), libnccl.so.2 and nccl.h
#       taken out of it, the library's debug sections stripped (strip --strip-debug: every loaded byte unchanged,
#       checked), split into pieces under .gpu/nccl/ (git-ignored) with manifest.txt (version, the sha256 and size of
#       the wheel, of its library, of the library carried, of the concatenated pieces and of each piece), and the
#       device calls printed with their carry lists. --slim ARCH (e.g. 90) zeroes every GPU code image in the
#       library's fatbins except the sm_ARCH cubins, keeping every offset, and xz-compresses the result (see below).
#       --lib FILE packs that library instead of a wheel (tests). Pieces: at most --piece-mib MiB (default: what
#       one call carries beside the working tree, 64 MiB - the tree - 2 MiB, at most 60), all of about one size.
#   bash validation/nccl_carry.sh probe [--adopt]
#       there, first: the machine's own NCCL (ldconfig -p, pip show nvidia-nccl-cu13, the nvidia.nccl module, every
#       libnccl.so.2 found with its ncclGetVersion) and the one the apps load (ldd of build/apps/train_gpt after
#       unpacking .gpu/bundle.tar.xz, as gpu_session.sh does). Exit 0 when the apps will load NCCL >= 2.30 (then
#       carry nothing), 1 when a carry is needed. --adopt: when the apps load an older one but the machine has a
#       newer one elsewhere (its nvidia-nccl-cu13 wheel, say), link that one into .gpu/nccl-lib/ so that `env` and
#       gpu_bundle.sh put it first, as they do a carried one, and exit 0
#   bash validation/nccl_carry.sh status
#       there: takes the pieces carried into .gpu/nccl/ (checked against the manifest carried with them) into
#       .gpu/nccl-lib/pieces/, where they stay while the machine stays warm, and says which are present and which
#       missing, whether a library is installed, and whether the bundle and its unpacked apps are there. Exit 0 when
#       every piece is present, 1 otherwise
#   bash validation/nccl_carry.sh assemble
#       there: as status, then the pieces concatenated, every sha256 checked (each piece, the whole, the decompressed
#       library), ncclGetVersion of the result checked against the manifest, installed as .gpu/nccl-lib/libnccl.so.2.
#       Prints "ASSEMBLED: NCCL <version> ..."; any mismatch prints "FAILED: ...", installs nothing and exits 1
#   source validation/nccl_carry.sh env [ROOT]
#       there: when .gpu/nccl-lib/libnccl.so.2 verifies against its manifest, exports LD_LIBRARY_PATH with
#       .gpu/nccl-lib first and HPCT_NCCL_CARRIED=<version>; else changes nothing and returns 1. gpu_bundle.sh unpack
#       does this itself (after its rule "the machine's copy wins", which concerns only the libraries it bundles), so
#       gpu_session.sh runs the apps with the carried NCCL. NCCL_MULTI_RANK_GPU_ENABLE=1 is not set here: the runs
#       that share a GPU set it (validation/gpu_layouts.py does)
#   bash validation/nccl_carry.sh verify | plan | version [LIB] | selftest WORK
#       verify: the installed library against its manifest (exit 0/1). plan: the device calls again, from the
#       manifest. version: ncclGetVersion of LIB, or of what dlopen("libnccl.so.2") finds: "2.32.3 23203 /path".
#       selftest: the ctest validation_nccl_carry (no network, no GPU): a small fake libnccl.so.2 (built with cc,
#       with debug sections and a synthetic fatbin) packed, carried into a folder as a GPU machine would get it,
#       status, assemble, env, a corrupted piece (refused), a corrupted library (refused by env), --slim
#
# Measured on 2026-11-28 with nvidia-nccl-cu13 2.32.3 (the newest; built with CUDA 13.4): libnccl.so.2 in the wheel
# 343,864,936 bytes, of which 72 MB debug sections; stripped 274,648,704 bytes (261.9 MiB). Its bulk is GPU code
# (.nv_fatbin 108.8 MB, __nv_relfatbin 158.8 MB: cubins for sm_75 to sm_120 and compute_120 PTX) and barely
# compresses: xz -6 258.8 MB (94%, 71 s on 2 cores), zstd -3 265.4 MB (97%), zstd -19 --long of the unstripped
# 269.1 MB. Not worth it: the full form travels uncompressed, in 6 pieces of 43.7 MiB with a working tree of
# 10.5 MiB. --slim 90 keeps only the sm_90 cubins (14.5 MB + 18.6 MB), zeroed elsewhere: xz 33.9 MB, one piece.
# nvidia-nccl-cu13 2.30.7 (the last 2.30 release on PyPI; built with CUDA 13.3) is smaller: 252.2 MB in the wheel,
# stripped 194.5 MiB, 4 pieces of 48.6 MiB; --slim 90 29.2 MiB. `pack --version 2.30.7` is the cheaper carry.
# The slimmed library loads and reports its version here; whether its kernels run on the GPU has not been seen yet
# (the driver picks the sm_90 image by its header and should never read the zeroed ones). The first NCCL case of
# the layout matrix is its test (test_comm_nccl wants one GPU per rank and skips at np 2 on one GPU); the full form
# is the fallback.
#
# The device budget (15 minutes a session, all calls, starts and idle time together; the machine goes back after
# about 30 s idle, taking .gpu/nccl-lib/ with it, so the calls of one carry follow each other at once):
#   call 1: carry [".gpu/bundle.tar.xz"] (~37 MiB; with the tree ~50 MiB):
#       bash validation/nccl_carry.sh probe --adopt > $OUT/probe.txt 2>&1; rc=$?; cat $OUT/probe.txt;
#       [ $rc = 0 ] && bash validation/gpu_session.sh $OUT/s --budget 450 --bench none --skip all --layouts 'ARGS'
#     If the machine already has NCCL >= 2.30 (or adopts one), this one call is the whole session: nothing is
#     carried. Else it ends after about a minute (the start and the unpack) and the pieces follow.
#   calls 2 .. N: carry [".gpu/nccl/manifest.txt", ".gpu/nccl/<piece k>"], command
#       bash validation/nccl_carry.sh status
#     and in the last one, with the last piece:
#       bash validation/nccl_carry.sh assemble && bash validation/gpu_session.sh $OUT/s --budget B ...
#   Full form: N = 7 (2.32.3, 6 pieces) or 5 (2.30.7, 4 pieces), each piece call a 55-60 MiB transfer; --slim 90:
#   N = 2. The start costs 1-2 minutes, each call its transfer (speed not measured yet) and the idle seconds before
#   the next; what is left goes to the last call's session: B about 300 s with 2.30.7's full form, 450 with --slim.
#   `pack` and `plan` print these calls with the exact carry lists.
NC_HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NC_ROOT="$(cd "$NC_HERE/.." && pwd)"
NC_PY="${NC_PY:-$(command -v /usr/bin/python3 || command -v python3)}"
NC_LIMIT_BYTES=$((64 * 1048576))  # what one device call carries, the working tree included
NC_MIN_CODE=23000                 # NCCL 2.30.0: several ranks of one communicator on one GPU

nc_say() { echo "nccl_carry: $*"; }
nc_fail() { echo "nccl_carry: FAILED: $*" >&2; return 1; }
nc_sha() { sha256sum "$1" | cut -d' ' -f1; }
nc_size() { stat -c %s "$1"; }
nc_mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
nc_get() { awk -v k="$1" -v f="${2:-2}" '$1 == k { print $f; exit }' "$3"; }  # KEY [FIELD] MANIFEST

# ncclGetVersion of a library (a path, or a name dlopen searches): "2.32.3 23203 /resolved/path"; exit 1 if it
# cannot be loaded or has no ncclGetVersion.
nc_version() {
  "$NC_PY" - "${1:-libnccl.so.2}" <<'PY'
import ctypes, os, sys
name = sys.argv[1]
try:
    lib = ctypes.CDLL(name)
    v = ctypes.c_int(0)
    rc = lib.ncclGetVersion(ctypes.byref(v))
except (OSError, AttributeError) as e:
    print(f"none 0 {name} ({e})")
    sys.exit(1)
if rc != 0:
    print(f"none 0 {name} (ncclGetVersion returned {rc})")
    sys.exit(1)
code = v.value
major, minor, patch = (code // 10000, code % 10000 // 100, code % 100) if code >= 10000 else \
    (code // 1000, code % 1000 // 100, code % 100)
path = name
with open("/proc/self/maps") as maps:
    for line in maps:
        f = line.split()
        if len(f) >= 6 and "libnccl" in os.path.basename(f[-1]):
            path = f[-1]
            break
print(f"{major}.{minor}.{patch} {code} {os.path.realpath(path)}")
PY
}

# ELF helpers: `loadcheck A B` (every byte a PT_LOAD segment maps is the same in both files, the ELF header's
# section-table fields aside), `slim IN OUT ARCH` (every code image of the fatbins in .nv_fatbin and __nv_relfatbin
# that is not an sm_ARCH cubin zeroed in place, headers kept), `fatbins FILE` (bytes per kind and arch).
nc_elf() {
  "$NC_PY" - "$@" <<'PY'
import collections, struct, sys

def sections(b):
    if b[:4] != b"\x7fELF" or b[4] != 2:
        sys.exit("not a 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", b, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", b, shoff + i * shentsize) for i in range(shnum)]
    strtab = hdrs[shstrndx][4]
    for h in hdrs:
        name = bytes(b[strtab + h[0]:b.index(0, strtab + h[0])]).decode()
        yield name, h[4], h[5]  # name, file offset, size

def entries(b, off, size):
    """(entry offset, header size, payload size, kind, arch) of every fatbin entry in [off, off+size)."""
    p, end = off, off + size
    while p + 16 <= end:
        magic, _, hsz, fsz = struct.unpack_from("<IHHQ", b, p)
        if magic != 0xBA55ED50:
            p += 8  # fatbins are 8-byte aligned, padding between them
            continue
        q, qe = p + hsz, p + hsz + fsz
        if qe > end:
            sys.exit(f"a fatbin at {p:#x} runs past its section")
        while q < qe:
            kind, _, ehs, psz = struct.unpack_from("<HHIQ", b, q)
            arch, = struct.unpack_from("<I", b, q + 28)
            if ehs < 32 or q + ehs + psz > qe:
                sys.exit(f"a malformed fatbin entry at {q:#x}")
            yield q, ehs, psz, kind, arch
            q += ehs + psz
        p = qe

FATBINS = (".nv_fatbin", "__nv_relfatbin")
mode = sys.argv[1]
if mode == "loadcheck":
    a, b = (open(f, "rb").read() for f in sys.argv[2:4])
    phoff, = struct.unpack_from("<Q", a, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", a, 0x36)
    if a[:0x28] != b[:0x28] or a[0x30:0x3C] != b[0x30:0x3C]:
        sys.exit("the ELF headers differ beyond the section table")
    for i in range(phnum):
        ptype, _, off, _, _, filesz, _, _ = struct.unpack_from("<IIQQQQQQ", a, phoff + i * phentsize)
        lo = max(off, 0x40)
        if ptype == 1 and a[lo:off + filesz] != b[lo:off + filesz]:
            sys.exit(f"the PT_LOAD segment at {off:#x} differs")
    print("loaded image unchanged")
elif mode == "slim":
    b = bytearray(open(sys.argv[2], "rb").read())
    keep = int(sys.argv[4])
    kept, zeroed = collections.Counter(), 0
    for name, off, size in sections(b):
        if name not in FATBINS:
            continue
        for q, ehs, psz, kind, arch in list(entries(b, off, size)):
            if kind == 2 and arch == keep:
                kept[name] += psz
            else:
                b[q + ehs:q + ehs + psz] = bytes(psz)
                zeroed += psz
    if not kept[".nv_fatbin"]:
        sys.exit(f"no sm_{keep} cubin in .nv_fatbin: nothing would run on that GPU")
    open(sys.argv[3], "wb").write(b)
    print(f"sm_{keep} cubins kept: " + ", ".join(f"{k} {v} bytes" for k, v in sorted(kept.items())) +
          f"; {zeroed} bytes of other code images zeroed")
elif mode == "fatbins":
    b = open(sys.argv[2], "rb").read()
    for name, off, size in sections(b):
        if name in FATBINS:
            t = collections.Counter()
            for q, ehs, psz, kind, arch in entries(b, off, size):
                t[("ptx" if kind == 1 else "elf" if kind == 2 else f"kind{kind}", arch)] += ehs + psz
            print(f"{name} {size} bytes: " + ", ".join(f"{k} sm_{a} {v}" for (k, a), v in sorted(t.items())))
PY
}

nc_xz() {  # -z IN OUT | -d IN OUT: xz when installed, else Python's lzma (same format)
  if command -v xz > /dev/null; then
    if [ "$1" = -z ]; then xz -6 -T0 -c "$2" > "$3"; else xz -dc "$2" > "$3"; fi
  else
    "$NC_PY" -c 'import lzma, shutil, sys
op = lzma.open if sys.argv[1] == "-d" else open
with op(sys.argv[2], "rb") as i, (lzma.open if sys.argv[1] == "-z" else open)(sys.argv[3], "wb") as o:
    shutil.copyfileobj(i, o, 1 << 22)' "$@"
  fi
}

nc_tree_bytes() {  # what every device call carries anyway: tracked and untracked-not-ignored files
  (cd "$NC_ROOT" && git ls-files -z --cached --others --exclude-standard 2>/dev/null |
     xargs -0 stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
}

# ---------------------------------------------------------------------------------------------------- pack (here)
nc_pack() {
  local work rc
  work="$(mktemp -d)"
  nc_pack_in "$work" "$@"
  rc=$?
  rm -rf "$work"
  return "$rc"
}

nc_pack_in() {
  local work="$1"
  shift
  local version="" slim="" strip=1 compress=auto piece_bytes="" lib="" out="$NC_ROOT/.gpu/nccl"
  local cache="${XDG_CACHE_HOME:-$HOME/.cache}/hpctrain/nccl-wheel"
  while [ "$#" -gt 0 ]; do
    case "$1" in
      --version) version="$2"; shift 2 ;;
      --slim) slim="${2#sm_}"; shift 2 ;;
      --no-strip) strip=0; shift ;;
      --compress) compress="$2"; shift 2 ;;
      --piece-mib) piece_bytes=$(($2 * 1048576)); shift 2 ;;
      --piece-bytes) piece_bytes="$2"; shift 2 ;;
      --lib) lib="$2"; shift 2 ;;
      --out) out="$2"; shift 2 ;;
      --cache) cache="$2"; shift 2 ;;
      *) nc_fail "pack: unknown argument '$1'"; return 2 ;;
    esac
  done
  case "$compress" in auto) [ -n "$slim" ] && compress=xz || compress=none ;; none|xz) ;;
    *) nc_fail "pack: --compress takes auto, none or xz"; return 2 ;; esac
  local source_line original
  if [ -z "$lib" ]; then
    mkdir -p "$cache"
    local pip_log wheel
    pip_log="$work/pip.log"
    # The GPU machine's Python is 3.12 on x86-64 with glibc 2.39; the wheel is py3-none, its manylinux tag varies
    # between versions (2.30.7: 2_18, 2.32.3: 2_27), and pip matches tags exactly: name every one up to 2_39.
    local plat=() g
    for g in 17 18 24 27 28 31 34 35 39; do plat+=(--platform "manylinux_2_${g}_x86_64"); done
    ${NC_PIP:-"$NC_PY" -m pip} download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      "${plat[@]}" --platform manylinux2014_x86_64 -d "$cache" "nvidia-nccl-cu13${version:+==$version}" \
      > "$pip_log" 2>&1 ||
      { tail -5 "$pip_log" >&2; nc_fail "pip download of nvidia-nccl-cu13${version:+==$version}"; return 1; }
    wheel="$(grep -oE 'nvidia_nccl_cu13-[0-9][^ /]*\.whl' "$pip_log" | tail -n 1)"
    [ -n "$wheel" ] && [ -f "$cache/$wheel" ] ||
      { cat "$pip_log" >&2; nc_fail "cannot tell which wheel pip saved"; return 1; }
    version="$(echo "$wheel" | cut -d- -f2)"
    mkdir -p "$cache/$version"
    "$NC_PY" - "$cache/$wheel" "$cache/$version" <<'PY' || { nc_fail "cannot extract the wheel"; return 1; }
import os, shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for member, name in (("nvidia/nccl/lib/libnccl.so.2", "libnccl.so.2"), ("nvidia/nccl/include/nccl.h", "nccl.h")):
        with z.open(member) as i, open(os.path.join(sys.argv[2], name), "wb") as o:
            shutil.copyfileobj(i, o, 1 << 22)
PY
    lib="$cache/$version/libnccl.so.2"
    source_line="wheel $wheel $(nc_sha "$cache/$wheel")"
    nc_say "nvidia-nccl-cu13 $version: $cache/$wheel ($(nc_mib "$(nc_size "$cache/$wheel")")); library and nccl.h in" \
           "$cache/$version/"
  else
    [ -f "$lib" ] || { nc_fail "pack: $lib is missing"; return 1; }
    source_line="file $(cd "$(dirname "$lib")" && pwd)/$(basename "$lib") -"
  fi
  local vline code
  vline="$(nc_version "$lib")" || { nc_fail "$lib does not load or has no ncclGetVersion: $vline"; return 1; }
  code="$(echo "$vline" | cut -d' ' -f2)"
  if [ -n "$version" ] && [ "$version" != "$(echo "$vline" | cut -d' ' -f1)" ]; then
    nc_fail "$lib reports NCCL ${vline%% *}, the wheel is $version"; return 1
  fi
  version="${vline%% *}"
  original="$(nc_size "$lib") $(nc_sha "$lib")"
  local cur="$lib" form=as-is
  if [ "$strip" = 1 ]; then
    strip --strip-debug -o "$work/stripped" "$lib" || { nc_fail "strip --strip-debug"; return 1; }
    nc_elf loadcheck "$lib" "$work/stripped" > /dev/null ||
      { nc_fail "strip changed what the loader maps: pack with --no-strip"; return 1; }
    cur="$work/stripped" form=stripped
  fi
  if [ -n "$slim" ]; then
    nc_elf slim "$cur" "$work/slim" "$slim" || { nc_fail "--slim $slim"; return 1; }
    cur="$work/slim" form="$form,slim-sm_$slim"
  fi
  [ "$(nc_version "$cur" | cut -d' ' -f2)" = "$code" ] || { nc_fail "the $form library no longer loads"; return 1; }
  local payload="$cur" name=libnccl.so.2
  if [ "$compress" = xz ]; then
    nc_xz -z "$cur" "$work/payload.xz" || { nc_fail "xz"; return 1; }
    payload="$work/payload.xz" name=libnccl.so.2.xz
  fi
  local psize tree="" limit n each
  psize="$(nc_size "$payload")"
  if [ -z "$piece_bytes" ]; then
    tree="$(nc_tree_bytes)"
    limit=$(( (NC_LIMIT_BYTES - tree - 2 * 1048576) / 1048576 * 1048576 ))
    [ "$limit" -gt $((60 * 1048576)) ] && limit=$((60 * 1048576))
    [ "$limit" -ge $((8 * 1048576)) ] ||
      { nc_fail "the working tree ($(nc_mib "$tree")) leaves no room for pieces; pass --piece-mib"; return 1; }
  else
    limit="$piece_bytes"
  fi
  n=$(( (psize + limit - 1) / limit ))
  each=$(( (psize + n - 1) / n ))
  each=$(( (each + 4095) / 4096 * 4096 ))
  mkdir -p "$out"
  rm -f "$out"/libnccl.so.2* "$out/manifest.txt"
  split -b "$each" -d -a 2 "$payload" "$out/$name.p" || { nc_fail "split"; return 1; }
  {
    echo "# validation/nccl_carry.sh pack, $(date -u +%Y-%m-%dT%H:%M:%SZ): carry this file with every piece"
    echo "version $version"
    echo "code $code"
    echo "source $source_line"
    echo "original $original"
    echo "form $form"
    echo "encoding $compress"
    echo "library $(nc_size "$cur") $(nc_sha "$cur")"
    echo "payload $psize $(nc_sha "$payload")"
    local p
    for p in "$out/$name".p*; do echo "piece $(basename "$p") $(nc_size "$p") $(nc_sha "$p")"; done
  } > "$out/manifest.txt"
  local why="--piece-bytes"
  [ -n "$tree" ] && why="64 MiB - the working tree $(nc_mib "$tree") - 2 MiB"
  nc_say "NCCL $version ($form, encoding $compress): library $(nc_mib "$(nc_size "$cur")"), payload" \
         "$(nc_mib "$psize") in $n piece(s) of at most $(nc_mib "$each") (limit $(nc_mib "$limit"): $why)" \
         "under ${out#"$NC_ROOT"/}/"
  nc_plan "$out/manifest.txt"
}

# The device calls of a manifest, with their carry lists (paths relative to the repository root).
nc_plan() {
  local man="${1:-$NC_ROOT/.gpu/nccl/manifest.txt}" rel pieces n i bundle="absent here" tree
  [ -f "$man" ] || { nc_fail "no manifest at $man: run pack"; return 1; }
  rel="$(dirname "$man")"; rel="${rel#"$NC_ROOT"/}"
  mapfile -t pieces < <(awk '$1 == "piece" { print $2 }' "$man")
  n="${#pieces[@]}"
  tree="$(nc_tree_bytes)"
  [ -f "$NC_ROOT/.gpu/bundle.tar.xz" ] && bundle="$(nc_mib "$(nc_size "$NC_ROOT/.gpu/bundle.tar.xz")")"
  echo "device calls (working tree $(nc_mib "$tree"); bundle $bundle); each call follows the last within ~30 s:"
  echo "  call 1: carry [\".gpu/bundle.tar.xz\"]"
  echo "    bash validation/nccl_carry.sh probe --adopt > \$OUT/probe.txt 2>&1; rc=\$?; cat \$OUT/probe.txt;" \
       "[ \$rc = 0 ] && bash validation/gpu_session.sh \$OUT/s --budget 450 --bench none --skip all" \
       "--layouts 'ARGS'"
  echo "    (exit 0 from probe: the machine's NCCL will do, this call is the session; else carry as follows)"
  echo "    ARGS: gpu_layouts.py's arguments, a part of the matrix that fits the budget (docs/cuda.md: --backend," \
       "--world, --only)"
  for ((i = 0; i < n; i++)); do
    echo "  call $((i + 2)): carry [\"$rel/manifest.txt\", \"$rel/${pieces[i]}\"]" \
         "($(nc_mib "$(awk -v p="${pieces[i]}" '$1 == "piece" && $2 == p { print $3 }' "$man")"))"
    if ((i + 1 < n)); then
      echo "    bash validation/nccl_carry.sh status"
    else
      echo "    bash validation/nccl_carry.sh assemble &&" \
           "bash validation/gpu_session.sh \$OUT/s --budget B --bench none --skip all --layouts 'ARGS'"
    fi
  done
  local largest
  largest="$(awk '$1 == "piece" && $3 > m { m = $3 } END { print m + 0 }' "$man")"
  if [ $((tree + largest + 4096)) -gt "$NC_LIMIT_BYTES" ]; then
    echo "  WARNING: the working tree grew: $(nc_mib "$tree") + a piece of $(nc_mib "$largest") is over 64 MiB;" \
         "pack again"
  fi
  echo "  budget: 900 s - the start (60-120 s) - call 1 (~60 s) - $((n - 1)) piece call(s) (transfer + idle gap," \
       "~40 s each) - the last call's transfer and checks (~60 s) = B for the session (at most 540: 600 s a command)"
}

# ------------------------------------------------------------------------------------------------ there: pieces
nc_receive() {  # ROOT: take carried pieces into .gpu/nccl-lib/pieces/, each checked against the manifest
  local root="$1" carried="$1/.gpu/nccl" dir="$1/.gpu/nccl-lib" name size sha f
  mkdir -p "$dir/pieces"
  if [ -f "$carried/manifest.txt" ] && ! cmp -s "$carried/manifest.txt" "$dir/manifest.txt"; then
    if [ -f "$dir/manifest.txt" ] &&
       [ "$(nc_get payload 3 "$dir/manifest.txt")" != "$(nc_get payload 3 "$carried/manifest.txt")" ]; then
      nc_say "a new manifest (NCCL $(nc_get version 2 "$carried/manifest.txt")): the pieces of the old one dropped"
      rm -f "$dir/pieces/"*
    fi
    cp "$carried/manifest.txt" "$dir/manifest.txt"
  fi
  [ -f "$dir/manifest.txt" ] || { nc_fail "no manifest: carry .gpu/nccl/manifest.txt with the pieces"; return 1; }
  while read -r _ name size sha; do
    f="$carried/$name"
    [ -f "$f" ] || continue
    if [ "$(nc_size "$f")" = "$size" ] && [ "$(nc_sha "$f")" = "$sha" ]; then
      mv -f "$f" "$dir/pieces/$name"
    else
      echo "nccl_carry: piece $name arrived corrupt ($(nc_size "$f") bytes, sha256 $(nc_sha "$f")): not taken" >&2
    fi
  done < <(awk '$1 == "piece"' "$dir/manifest.txt")
}

nc_status() {  # ROOT; exit 0 when every piece is present
  local root="${1:-$NC_ROOT}" dir have=() missing=() bad=() name size sha f
  dir="$root/.gpu/nccl-lib"
  nc_receive "$root" || return 1
  while read -r _ name size sha; do
    f="$dir/pieces/$name"
    if [ ! -f "$f" ]; then missing+=("$name")
    elif [ "$(nc_size "$f")" != "$size" ] || [ "$(nc_sha "$f")" != "$sha" ]; then bad+=("$name")
    else have+=("$name"); fi
  done < <(awk '$1 == "piece"' "$dir/manifest.txt")
  local total=$((${#have[@]} + ${#missing[@]} + ${#bad[@]}))
  nc_say "NCCL $(nc_get version 2 "$dir/manifest.txt") ($(nc_get form 2 "$dir/manifest.txt"), encoding" \
         "$(nc_get encoding 2 "$dir/manifest.txt")): ${#have[@]} of $total piece(s) here${have:+ (${have[*]})}"
  [ "${#missing[@]}" = 0 ] || nc_say "missing: ${missing[*]}"
  [ "${#bad[@]}" = 0 ] || nc_say "corrupt (carry again): ${bad[*]}"
  if [ -f "$dir/libnccl.so.2" ]; then
    if nc_verify "$root" > /dev/null 2>&1; then nc_say "installed: $dir/libnccl.so.2, verified"
    else nc_say "installed: $dir/libnccl.so.2, NOT matching the manifest"; fi
  else
    nc_say "installed: none yet"
  fi
  nc_say "bundle: .gpu/bundle.tar.xz $([ -f "$root/.gpu/bundle.tar.xz" ] && echo present || echo absent)," \
         "build/apps/train_gpt $([ -x "$root/build/apps/train_gpt" ] && echo unpacked || echo "not unpacked")"
  [ "${#missing[@]}" = 0 ] && [ "${#bad[@]}" = 0 ]
}

nc_assemble() {  # ROOT
  local root="${1:-$NC_ROOT}" dir man name size sha f
  dir="$root/.gpu/nccl-lib" man="$root/.gpu/nccl-lib/manifest.txt"
  nc_status "$root" || { nc_fail "assemble: pieces missing or corrupt (above)"; return 1; }
  local tmp="$dir/.assemble"
  rm -rf "$tmp"; mkdir -p "$tmp"
  while read -r _ name size sha; do
    f="$dir/pieces/$name"
    [ "$(nc_sha "$f")" = "$sha" ] || { rm -rf "$tmp"; nc_fail "piece $name: sha256 mismatch"; return 1; }
    cat "$f" >> "$tmp/payload"
  done < <(awk '$1 == "piece"' "$man")
  [ "$(nc_size "$tmp/payload")" = "$(nc_get payload 2 "$man")" ] &&
    [ "$(nc_sha "$tmp/payload")" = "$(nc_get payload 3 "$man")" ] ||
    { rm -rf "$tmp"; nc_fail "the concatenated pieces do not match the manifest's payload"; return 1; }
  case "$(nc_get encoding 2 "$man")" in
    none) mv "$tmp/payload" "$tmp/libnccl.so.2" ;;
    xz) nc_xz -d "$tmp/payload" "$tmp/libnccl.so.2" || { rm -rf "$tmp"; nc_fail "xz -d"; return 1; } ;;
    *) rm -rf "$tmp"; nc_fail "unknown encoding in the manifest"; return 1 ;;
  esac
  [ "$(nc_size "$tmp/libnccl.so.2")" = "$(nc_get library 2 "$man")" ] &&
    [ "$(nc_sha "$tmp/libnccl.so.2")" = "$(nc_get library 3 "$man")" ] ||
    { rm -rf "$tmp"; nc_fail "the assembled library does not match the manifest's sha256"; return 1; }
  local vline
  vline="$(nc_version "$tmp/libnccl.so.2")" ||
    { rm -rf "$tmp"; nc_fail "the assembled library does not load: $vline"; return 1; }
  [ "$(echo "$vline" | cut -d' ' -f2)" = "$(nc_get code 2 "$man")" ] ||
    { rm -rf "$tmp"; nc_fail "ncclGetVersion says ${vline%% *}, the manifest $(nc_get version 2 "$man")"; return 1; }
  chmod 755 "$tmp/libnccl.so.2"
  rm -f "$dir/libnccl.so.2"
  mv "$tmp/libnccl.so.2" "$dir/libnccl.so.2"
  rm -rf "$tmp"
  echo "ASSEMBLED: NCCL ${vline%% *} ($(nc_get form 2 "$man")) at $dir/libnccl.so.2, sha256 $(nc_get library 3 "$man")"
}

nc_verify() {  # ROOT: the installed library against its manifest
  local root="${1:-$NC_ROOT}" dir
  dir="$root/.gpu/nccl-lib"
  [ -f "$dir/libnccl.so.2" ] && [ -f "$dir/manifest.txt" ] ||
    { nc_fail "no library or manifest in $dir"; return 1; }
  [ "$(nc_sha "$dir/libnccl.so.2")" = "$(nc_get library 3 "$dir/manifest.txt")" ] ||
    { nc_fail "$dir/libnccl.so.2 does not match its manifest's sha256"; return 1; }
  nc_say "verified: NCCL $(nc_get version 2 "$dir/manifest.txt") at $dir/libnccl.so.2"
}

nc_env() {  # [ROOT], sourced: the verified library first in LD_LIBRARY_PATH
  local root="${1:-$NC_ROOT}" dir rest="" e
  dir="$root/.gpu/nccl-lib"
  nc_verify "$root" > /dev/null || return 1
  local IFS=:
  for e in ${LD_LIBRARY_PATH:-}; do
    [ -n "$e" ] && [ "$e" != "$dir" ] && rest="${rest:+$rest:}$e"
  done
  export LD_LIBRARY_PATH="$dir${rest:+:$rest}"
  export HPCT_NCCL_CARRIED
  HPCT_NCCL_CARRIED="$(nc_get version 2 "$dir/manifest.txt")"
  nc_say "NCCL $HPCT_NCCL_CARRIED ($(nc_get form 2 "$dir/manifest.txt")) first in LD_LIBRARY_PATH: $dir"
}

# ------------------------------------------------------------------------------------------------- there: probe
nc_probe() {
  local adopt=0 root="$NC_ROOT"
  [ "${1:-}" = --adopt ] && adopt=1
  echo "== ldconfig -p | grep nccl"
  ldconfig -p 2>/dev/null | grep nccl || echo "(none)"
  echo "== python3 -m pip show nvidia-nccl-cu13"
  python3 -m pip show nvidia-nccl-cu13 2>&1 | grep -E '^(Name|Version|Location):' || echo "(not installed)"
  echo "== import nvidia.nccl"
  python3 -c 'import nvidia.nccl as m; print(list(m.__path__))' 2>&1 | tail -n 1
  echo "== every libnccl.so.2 found: version code path"
  local dirs=() d f line code best="" best_code=0
  mapfile -t dirs < <(python3 -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null)
  local cands=()
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/*/lib /usr/lib/x86_64-linux-gnu \
           /usr/lib64 /usr/local/lib "${dirs[@]/%//nvidia/nccl/lib}"; do
    [ -e "$d/libnccl.so.2" ] && cands+=("$(readlink -f "$d/libnccl.so.2")")
  done
  while read -r f; do
    cands+=("$(readlink -f "$f")")
  done < <(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 / { print $NF }')
  mapfile -t cands < <(printf '%s\n' "${cands[@]}" | awk 'NF && !seen[$0]++')
  for f in "${cands[@]}"; do
    line="$(nc_version "$f")"
    echo "$line"
    code="$(echo "$line" | cut -d' ' -f2)"
    if [ "$code" -gt "$best_code" ]; then best_code="$code" best="$f"; fi
  done
  [ "${#cands[@]}" -gt 0 ] || echo "(none)"
  echo "== the NCCL the apps load"
  local apps="" how
  if [ -f "$root/.gpu/bundle.tar.xz" ]; then
    how="ldd build/apps/train_gpt after gpu_bundle.sh unpack"
    # shellcheck source=validation/gpu_bundle.sh
    apps="$(cd "$root" && { source validation/gpu_bundle.sh unpack .gpu/bundle.tar.xz > /dev/null 2>&1 || exit 1
                              ldd build/apps/train_gpt | awk '$1 ~ /^libnccl\.so/ { print $3 }'; })"
  elif [ -x "$root/build/apps/train_gpt" ]; then
    how="ldd build/apps/train_gpt (no bundle; with env's .gpu/nccl-lib where it verifies)"
    apps="$(nc_env "$root" > /dev/null 2>&1; ldd "$root/build/apps/train_gpt" | awk '$1 ~ /^libnccl\.so/ { print $3 }')"
  else
    how="dlopen(libnccl.so.2) (neither the bundle nor the apps here; with env's .gpu/nccl-lib where it verifies)"
    apps="$(nc_env "$root" > /dev/null 2>&1; nc_version libnccl.so.2 | cut -d' ' -f3)"
  fi
  local aline acode=0
  aline="$(nc_version "${apps:-libnccl.so.2}")" && acode="$(echo "$aline" | cut -d' ' -f2)"
  echo "$how: $aline"
  if [ "$acode" -ge "$NC_MIN_CODE" ]; then
    echo "PROBE: the apps load NCCL ${aline%% *} (>= 2.30): nothing to carry"
    return 0
  fi
  if [ "$best_code" -ge "$NC_MIN_CODE" ]; then
    if [ "$adopt" = 1 ]; then
      local dir="$root/.gpu/nccl-lib" bline
      bline="$(nc_version "$best")"
      mkdir -p "$dir"
      ln -sfn "$best" "$dir/libnccl.so.2"
      { echo "# validation/nccl_carry.sh probe --adopt: the machine's own NCCL, linked"
        echo "version ${bline%% *}"; echo "code $best_code"; echo "source machine $best -"
        echo "form machine"; echo "encoding none"
        echo "library $(nc_size "$best") $(nc_sha "$best")"; } > "$dir/manifest.txt"
      echo "PROBE: the apps load NCCL ${aline%% *}; adopted the machine's NCCL ${bline%% *} ($best) into" \
           ".gpu/nccl-lib: nothing to carry (gpu_bundle.sh unpack puts it first)"
      return 0
    fi
    echo "PROBE: the apps load NCCL ${aline%% *}, but the machine has $(nc_version "$best" | cut -d' ' -f1) at $best:" \
         "run probe --adopt"
    return 1
  fi
  echo "PROBE: no NCCL >= 2.30 on this machine (the apps load ${aline%% *}): carry one (nccl_carry.sh plan)"
  return 1
}

# ------------------------------------------------------------------------------------------------ ctest selftest
# The selftest's damage: the byte at OFFSET of FILE replaced by its complement, so the file always changes (writing a
# fixed byte left it intact wherever the file already held that byte there, and the selftest's library differs with
# the path it is built in).
nc_flip_byte() {  # FILE OFFSET
  local b
  b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
  printf "\\$(printf '%03o' $((255 - b)))" | dd of="$1" bs=1 seek="$2" conv=notrunc 2> /dev/null
}

nc_selftest() {
  local work="${1:?selftest WORK}" script="$NC_HERE/nccl_carry.sh" n=0
  local st_fail=0
  ok() { n=$((n + 1)); echo "ok $n: $*"; }
  bad() { echo "FAILED: $*"; st_fail=1; }
  for t in cc strip split sha256sum; do command -v "$t" > /dev/null || { bad "$t is not installed"; return 1; }; done
  rm -rf "$work"; mkdir -p "$work/src"
  # A fake libnccl.so.2: ncclGetVersion -> 2.32.3, debug sections (-g), 300 KiB of random bytes in .rodata, and a
  # .nv_fatbin section holding one fatbin of three images (an sm_75 cubin, an sm_90 cubin, compute_120 PTX) filled
  # with 'A', 'B' and 'C'.
  "$NC_PY" - "$work/src" <<'PY'
import os, struct, sys
d = sys.argv[1]
open(os.path.join(d, "rand.bin"), "wb").write(os.urandom(300 * 1024))
def entry(kind, arch, fill, n):
    h = struct.pack("<HHIQ", kind, 0x101, 64, n) + bytes(12) + struct.pack("<I", arch)
    return h + bytes(64 - len(h)) + fill * n
body = entry(2, 75, b"A", 4096) + entry(2, 90, b"B", 4096) + entry(1, 120, b"C", 4096)
fat = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body
open(os.path.join(d, "fatbin.bin"), "wb").write(fat)
PY
  cat > "$work/src/fake.c" <<'C'
__asm__(".section .rodata\n.balign 8\n.incbin \"rand.bin\"\n.previous\n"
        ".section .nv_fatbin,\"a\"\n.balign 8\n.incbin \"fatbin.bin\"\n.previous\n");
int ncclGetVersion(int *v) { *v = 23203; return 0; }
C
  (cd "$work/src" && cc -shared -fPIC -g -O1 -o libnccl.so.2 fake.c) || { bad "cc of the fake library"; return 1; }
  strip --strip-debug -o "$work/src/expected.so" "$work/src/libnccl.so.2"

  # Here: pack into a copy of the repository's layout, 96 KiB pieces.
  local here="$work/here" there="$work/there" log="$work/log"
  mkdir -p "$here/.gpu" "$there/validation" "$there/.gpu/nccl"
  bash "$script" pack --lib "$work/src/libnccl.so.2" --piece-bytes 98304 --out "$here/.gpu/nccl" > "$log" 2>&1 &&
    ok "pack" || { cat "$log"; bad "pack"; return 1; }
  local man="$here/.gpu/nccl/manifest.txt" pieces=()
  mapfile -t pieces < <(awk '$1 == "piece" { print $2 }' "$man")
  [ "${#pieces[@]}" -ge 3 ] && ok "${#pieces[@]} pieces, form $(nc_get form 2 "$man")" ||
    bad "expected 3 or more pieces, got ${#pieces[@]}"
  [ "$(nc_get version 2 "$man")" = 2.32.3 ] && [ "$(nc_get form 2 "$man")" = stripped ] &&
    [ "$(nc_get library 3 "$man")" = "$(nc_sha "$work/src/expected.so")" ] &&
    ok "manifest: version 2.32.3, the stripped library's sha256" || bad "manifest: $(cat "$man")"
  grep -q 'call 2: carry \[".*manifest.txt", ".*p00"\]' "$log" && ok "the plan names the carry lists" ||
    bad "pack printed no plan: $(cat "$log")"

  # There: the script in a fresh tree; the manifest and two pieces arrive.
  cp "$script" "$there/validation/"
  local ts="$there/validation/nccl_carry.sh"
  cp "$man" "$here/.gpu/nccl/${pieces[0]}" "$here/.gpu/nccl/${pieces[1]}" "$there/.gpu/nccl/"
  bash "$ts" status > "$log" 2>&1
  [ $? = 1 ] && grep -q "2 of ${#pieces[@]} piece(s) here" "$log" && grep -q "missing: ${pieces[2]}" "$log" &&
    ok "status: 2 of ${#pieces[@]} here, the rest missing" || { cat "$log"; bad "status with two pieces"; }
  bash "$ts" assemble > "$log" 2>&1 && bad "assemble with pieces missing succeeded" ||
    ok "assemble refuses while pieces are missing"
  # A piece that arrives corrupt (one byte changed) is not taken.
  cp "$here/.gpu/nccl/${pieces[2]}" "$there/.gpu/nccl/"
  nc_flip_byte "$there/.gpu/nccl/${pieces[2]}" 700
  bash "$ts" status > "$log" 2>&1
  grep -q "piece ${pieces[2]} arrived corrupt" "$log" && [ ! -f "$there/.gpu/nccl-lib/pieces/${pieces[2]}" ] &&
    ok "a piece that arrives corrupt is refused" || { cat "$log"; bad "a corrupt arrival"; }
  local p
  for p in "${pieces[@]:2}"; do cp "$here/.gpu/nccl/$p" "$there/.gpu/nccl/"; done
  cp "$man" "$there/.gpu/nccl/"
  bash "$ts" status > "$log" 2>&1 && ok "status: every piece here" || { cat "$log"; bad "status, all pieces"; }
  bash "$ts" assemble > "$log" 2>&1 && grep -q "^ASSEMBLED: NCCL 2.32.3" "$log" &&
    cmp -s "$there/.gpu/nccl-lib/libnccl.so.2" "$work/src/expected.so" &&
    ok "assemble: NCCL 2.32.3, byte for byte the stripped library" || { cat "$log"; bad "assemble"; }
  # env, sourced: first in LD_LIBRARY_PATH, the version exported, and dlopen by name finds it.
  (
    export LD_LIBRARY_PATH=/nonexistent/a:/nonexistent/b
    # shellcheck source=validation/nccl_carry.sh
    source "$ts" env > "$log" 2>&1 || exit 1
    # shellcheck source=validation/nccl_carry.sh
    source "$ts" env >> "$log" 2>&1 || exit 1  # twice: still once in the path
    [ "${LD_LIBRARY_PATH%%:*}" = "$there/.gpu/nccl-lib" ] && [ "$HPCT_NCCL_CARRIED" = 2.32.3 ] &&
      [ "${LD_LIBRARY_PATH#*:}" = /nonexistent/a:/nonexistent/b ] || exit 1
    [ "$(nc_version libnccl.so.2 | cut -d' ' -f3)" = "$there/.gpu/nccl-lib/libnccl.so.2" ]
  ) && ok "env: .gpu/nccl-lib first, HPCT_NCCL_CARRIED=2.32.3, dlopen finds it" || { cat "$log"; bad "env"; }
  # A library whose ncclGetVersion disagrees with the manifest is not installed.
  sed -i 's/^code .*/code 23000/' "$there/.gpu/nccl/manifest.txt"
  bash "$ts" assemble > "$log" 2>&1
  [ $? = 1 ] && grep -q "ncclGetVersion says 2.32.3" "$log" &&
    cmp -s "$there/.gpu/nccl-lib/libnccl.so.2" "$work/src/expected.so" &&
    ok "assemble refuses a library whose version is not the manifest's" || { cat "$log"; bad "version check"; }
  cp "$man" "$there/.gpu/nccl/"
  # A piece corrupted after it arrived: assemble fails and the installed library stays as it was.
  nc_flip_byte "$there/.gpu/nccl-lib/pieces/${pieces[1]}" 500
  bash "$ts" assemble > "$log" 2>&1
  [ $? = 1 ] && grep -q "corrupt (carry again): ${pieces[1]}" "$log" &&
    cmp -s "$there/.gpu/nccl-lib/libnccl.so.2" "$work/src/expected.so" &&
    ok "assemble with a corrupted piece fails, naming it; the installed library untouched" ||
    { cat "$log"; bad "assemble with a corrupted piece"; }
  # A corrupted installed library: env refuses it and leaves LD_LIBRARY_PATH alone.
  nc_flip_byte "$there/.gpu/nccl-lib/libnccl.so.2" 100
  (
    export LD_LIBRARY_PATH=/nonexistent/a
    # shellcheck source=validation/nccl_carry.sh
    source "$ts" env > "$log" 2>&1 && exit 1
    [ "$LD_LIBRARY_PATH" = /nonexistent/a ] && [ -z "${HPCT_NCCL_CARRIED:-}" ]
  ) && ok "env refuses a library that does not match its manifest" || { cat "$log"; bad "env, corrupted library"; }

  # --slim 90, xz: the sm_90 image kept, the others zeroed, every offset kept, the version still loads.
  rm -rf "$here/.gpu/nccl" "$there/.gpu"
  mkdir -p "$there/.gpu/nccl"
  bash "$script" pack --lib "$work/src/libnccl.so.2" --slim 90 --piece-bytes 65536 --out "$here/.gpu/nccl" \
    > "$log" 2>&1 || { cat "$log"; bad "pack --slim 90"; return 1; }
  [ "$(nc_get encoding 2 "$man")" = xz ] && [ "$(nc_get form 2 "$man")" = stripped,slim-sm_90 ] &&
    ok "pack --slim 90: form $(nc_get form 2 "$man"), encoding xz" || bad "slim manifest: $(cat "$man")"
  cp "$here/.gpu/nccl/"* "$there/.gpu/nccl/"
  bash "$ts" assemble > "$log" 2>&1 && grep -q "^ASSEMBLED: NCCL 2.32.3" "$log" || { cat "$log"; bad "slim assemble"; }
  if "$NC_PY" - "$work/src/expected.so" "$there/.gpu/nccl-lib/libnccl.so.2" <<'PY'
a, b = (open(f, "rb").read() for f in __import__("sys").argv[1:3])
i = a.index(b"A" * 4096); j = a.index(b"B" * 4096); k = a.index(b"C" * 4096)
diff = [x for x in range(len(a)) if a[x] != b[x]] if len(a) == len(b) else None
assert diff is not None, "sizes differ"
assert b[j:j + 4096] == b"B" * 4096 and b[i:i + 4096] == bytes(4096) and b[k:k + 4096] == bytes(4096)
assert set(diff) == set(range(i, i + 4096)) | set(range(k, k + 4096)), "bytes outside the zeroed images changed"
PY
  then ok "slim: sm_90 kept, others zeroed"; else bad "slim: the fatbin images"; fi
  [ "$st_fail" = 0 ] && echo "VALID: nccl_carry ($n checks)"
  [ "$st_fail" = 0 ]
}

nc_usage() {
  echo "usage: bash validation/nccl_carry.sh pack [--version V] [--slim ARCH] [--no-strip] [--compress auto|none|xz]" \
       "[--piece-mib N] [--lib FILE] [--out DIR] | probe [--adopt] | status | assemble | verify | plan" \
       "| version [LIB]" \
       "| selftest WORK;  source validation/nccl_carry.sh env [ROOT]" >&2
}

if [ "${BASH_SOURCE[0]}" != "$0" ]; then  # sourced: only env, and the caller's shell options stay as they were
  case "${1:-}" in
    env) shift; nc_env "$@" ;;
    *) nc_usage; false ;;
  esac
else
  set -uo pipefail
  cmd="${1:-}"
  shift || true
  case "$cmd" in
    pack) nc_pack "$@" ;;
    plan) nc_plan "$@" ;;
    probe) nc_probe "$@" ;;
    status) nc_status ;;
    assemble) nc_assemble ;;
    verify) nc_verify ;;
    version) nc_version "${1:-}" ;;
    selftest) nc_selftest "$@" ;;
    env) echo "nccl_carry: env must be sourced: source validation/nccl_carry.sh env" >&2; exit 2 ;;
    *) nc_usage; exit 2 ;;
  esac
fi
