#!/usr/bin/env bash
# Checks that every tracked C++ source (*.cpp *.hpp *.h *.cu *.cuh) is formatted per the repo's .clang-format.
#   bash scripts/check_format.sh          check; exit 1 listing the files that need clang-format
#   bash scripts/check_format.sh --diff   also print what clang-format would change
#   bash scripts/check_format.sh --fix    reformat those files in place
# Runs from any directory (ctest test "format_check"). CLANG_FORMAT=... picks another binary.
# The style was tuned on clang-format 14 (Debian 12); other versions may disagree on a few lines.
set -euo pipefail

mode=check
case "${1:-}" in
  "") ;;
  --fix) mode=fix ;;
  --diff) mode=diff ;;
  -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: bash scripts/check_format.sh [--fix|--diff]" >&2; exit 2 ;;
esac

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

CF=${CLANG_FORMAT:-clang-format}
if ! command -v "$CF" >/dev/null 2>&1; then
  echo "format: $CF not found; install it with 'apt-get install clang-format' (scripts/setup.sh installs it)"
  exit 1
fi
if [ ! -f .clang-format ]; then
  echo "format: $ROOT/.clang-format is missing"
  exit 1
fi
version=$("$CF" --version | sed -n 's/.*version \([0-9][0-9]*\).*/\1/p')
if [ "${version:-0}" != 14 ]; then
  echo "format: note: $("$CF" --version | head -1) in use; .clang-format was tuned on clang-format 14 (Debian 12)"
fi

# Tracked sources that exist in the working tree (a file deleted but not yet committed is skipped).
files=()
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  while IFS= read -r -d '' f; do
    [ -f "$f" ] && files+=("$f")
  done < <(git ls-files -z -- '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh')
else  # a source tree without .git: the same directories git would list
  while IFS= read -r -d '' f; do files+=("${f#./}"); done < <(
    find ./lib ./apps ./tests ./validation -type f \
      \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0 2>/dev/null | sort -z)
fi
if [ ${#files[@]} -eq 0 ]; then
  echo "format: no C++ sources found under $ROOT"
  exit 1
fi

# A broken .clang-format would make every file "fail": report it once instead.
if ! err=$("$CF" --style=file --dump-config "${files[0]}" 2>&1 >/dev/null); then
  echo "format: clang-format cannot read $ROOT/.clang-format:"
  echo "$err"
  exit 1
fi

# The files whose formatting differs (2 parallel clang-format workers).
mapfile -t bad < <(printf '%s\0' "${files[@]}" | xargs -0 -n 16 -P 2 sh -c '
  cf=$1; shift
  for f; do "$cf" --dry-run --Werror --style=file "$f" >/dev/null 2>&1 || echo "$f"; done' _ "$CF" | LC_ALL=C sort)

if [ ${#bad[@]} -eq 0 ]; then
  echo "format: OK (${#files[@]} files)"
  exit 0
fi

if [ "$mode" = fix ]; then
  printf '%s\0' "${bad[@]}" | xargs -0 -n 16 -P 2 "$CF" -i --style=file
  echo "format: reformatted ${#bad[@]} of ${#files[@]} files:"
  printf '  %s\n' "${bad[@]}"
  exit 0
fi

if [ "$mode" = diff ]; then
  for f in "${bad[@]}"; do
    "$CF" --style=file "$f" | diff -u --label "a/$f" --label "b/$f" "$f" - || true
  done
fi
echo "format: ${#bad[@]} files need clang-format:"
printf '  %s\n' "${bad[@]}"
echo "fix with: bash scripts/check_format.sh --fix"
echo "      or: clang-format -i --style=file FILES   (from $ROOT)"
exit 1
