#!/usr/bin/env bash
# Creates every data file the tiny and demo decks need (docs/contracts.md "Data preparation"), from Debian
# packages that scripts/setup.sh installed. Idempotent: a file whose inputs have not changed since it was
# written is left alone, so a second run takes well under a second.
#
#   scripts/prepare_data.sh
#
# Environment:
#   HPCT_DATA_DIR   where the data goes (default <repository>/data); decks resolve data.* paths against it
#   HPCT_BUILD_DIR  the CMake build directory holding apps/prepare_text and apps/prepare_images
#                   (default <repository>/build)
#
# Files written:
#   kjv.txt         the King James Bible as plain text (bible-kjv), ~4.3 MB, ASCII
#   kjv_train.bin   its first 90% as byte-level tokens (vocab 256), llm.c / nanoGPT shard format
#   kjv_val.bin     its last 10%
#   kjv_shards/     the same split with the training part in 1,000,000-token shards, llm.c's naming
#                   (kjv_train_000000.bin .. kjv_train_000003.bin, the last one short) and kjv_val.bin: the data of
#                   inputs/gpt_shards.toml (a glob of shards, data.order = "epoch")
#   fmnist_train.h5      Fashion-MNIST training images (dataset-fashion-mnist), HDF5: /images uint8
#                        60000 x 1 x 28 x 28, /labels int32 (0..9)
#   fmnist_test.h5       its 10,000 test images, same layout
#   fmnist_train_10k.h5  the first 10,000 training images (the CI smoke decks' subset)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA_DIR="${HPCT_DATA_DIR:-$REPO/data}"
BUILD_DIR="${HPCT_BUILD_DIR:-$REPO/build}"
PREPARE_TEXT="$BUILD_DIR/apps/prepare_text"
PREPARE_IMAGES="$BUILD_DIR/apps/prepare_images"
FMNIST_SRC=/usr/share/datasets/fashion-mnist
FMNIST_SUBSET=10000
VAL_FRACTION=0.1   # docs/contracts.md: validation = the last 10% of the text

say() { echo "[prepare_data] $*"; }
die() { echo "[prepare_data] error: $*" >&2; exit 1; }

# ---- prerequisites ------------------------------------------------------------------------------
if [ ! -x "$PREPARE_TEXT" ]; then
  die "$PREPARE_TEXT is not built: run scripts/build.sh (or 'cmake --build $BUILD_DIR --target prepare_text' in a configured build; set HPCT_BUILD_DIR if yours is elsewhere)"
fi
if [ ! -x "$PREPARE_IMAGES" ]; then
  die "$PREPARE_IMAGES is not built: run scripts/build.sh (or 'cmake --build $BUILD_DIR --target prepare_images' in a configured build; set HPCT_BUILD_DIR if yours is elsewhere)"
fi
if [ ! -d "$FMNIST_SRC" ]; then
  die "$FMNIST_SRC is missing (Debian package dataset-fashion-mnist): run scripts/setup.sh"
fi
BIBLE="$(command -v bible || true)"
if [ -z "$BIBLE" ]; then
  die "the 'bible' command (Debian package bible-kjv) is missing: run scripts/setup.sh"
fi
mkdir -p "$DATA_DIR" || die "cannot create the data directory $DATA_DIR: set HPCT_DATA_DIR to a writable directory"

start=$SECONDS

# ---- King James Bible -> kjv.txt ------------------------------------------------------------------
# `bible -l0` prints every verse on one line (no wrapping) as "  <verse> <text>", with a blank line and a
# "<Book> <chapter>" heading before each chapter. The output is pure ASCII with \n line ends, so it is
# kept exactly as printed: headings and verse numbers are a little structure the model can learn.
# Up to date when it exists and is newer than the bible program and its data file (a package upgrade
# redoes it).
KJV_TXT="$DATA_DIR/kjv.txt"
kjv_sources=("$BIBLE")
for f in /usr/lib/bible.data /usr/share/bible-kjv/bible.data; do
  [ -e "$f" ] && kjv_sources+=("$f")
done
kjv_fresh=1
if [ -s "$KJV_TXT" ]; then
  for src in "${kjv_sources[@]}"; do
    [ "$src" -nt "$KJV_TXT" ] && kjv_fresh=0
  done
else
  kjv_fresh=0
fi
if [ "$kjv_fresh" = 1 ]; then
  say "kjv.txt: up to date ($(stat -c %s "$KJV_TXT") bytes)"
else
  # stdin from /dev/null: without a verse argument bible is interactive and reads stdin; never let it block.
  "$BIBLE" -l0 'Gen1:1-Rev22:21' </dev/null >"$KJV_TXT.tmp" || die "'bible -l0 Gen1:1-Rev22:21' failed: run scripts/setup.sh (packages bible-kjv, bible-kjv-text)"
  bytes=$(stat -c %s "$KJV_TXT.tmp")
  # The full text is 4,298,239 bytes with Debian 12's bible-kjv-text; far less means a broken install.
  if [ "$bytes" -lt 4000000 ]; then
    rm -f "$KJV_TXT.tmp"
    die "bible printed only $bytes bytes instead of ~4.3 MB: reinstall bible-kjv-text (scripts/setup.sh)"
  fi
  mv -f "$KJV_TXT.tmp" "$KJV_TXT"
  say "kjv.txt: wrote $bytes bytes with 'bible -l0 Gen1:1-Rev22:21'"
fi

# ---- kjv.txt -> kjv_train.bin, kjv_val.bin ----------------------------------------------------------
# Up to date when both shards exist and are newer than the text and the tool that wrote them.
prepare_text_shards() {  # name text
  local name=$1 text=$2
  local train="$DATA_DIR/${name}_train.bin" val="$DATA_DIR/${name}_val.bin"
  if [ -s "$train" ] && [ -s "$val" ] &&
     [ "$train" -nt "$text" ] && [ "$val" -nt "$text" ] &&
     [ "$train" -nt "$PREPARE_TEXT" ] && [ "$val" -nt "$PREPARE_TEXT" ]; then
    say "${name}_train.bin, ${name}_val.bin: up to date ($(( ($(stat -c %s "$train") - 1024) / 2 )) + $(( ($(stat -c %s "$val") - 1024) / 2 )) tokens)"
    return
  fi
  "$PREPARE_TEXT" "$text" --out-dir "$DATA_DIR" --name "$name" --val-fraction "$VAL_FRACTION" |
    sed 's/^/[prepare_data] /'
}
prepare_text_shards kjv "$KJV_TXT"

# ---- kjv.txt -> kjv_shards/kjv_train_%06d.bin, kjv_shards/kjv_val.bin ----------------------------------------
# Up to date when the first shard and the validation file exist and are newer than the text and the tool; else every
# kjv_train_*.bin is removed first (a different shard size leaves no stale shard behind) and all are rewritten (~0.1 s).
SHARD_TOKENS=1000000
SHARD_DIR="$DATA_DIR/kjv_shards"
first_shard="$SHARD_DIR/kjv_train_000000.bin" shard_val="$SHARD_DIR/kjv_val.bin"
if [ -s "$first_shard" ] && [ -s "$shard_val" ] &&
   [ "$first_shard" -nt "$KJV_TXT" ] && [ "$shard_val" -nt "$KJV_TXT" ] &&
   [ "$first_shard" -nt "$PREPARE_TEXT" ] && [ "$shard_val" -nt "$PREPARE_TEXT" ]; then
  say "kjv_shards/: up to date ($(ls "$SHARD_DIR"/kjv_train_*.bin | wc -l) training shards + kjv_val.bin)"
else
  mkdir -p "$SHARD_DIR" || die "cannot create $SHARD_DIR"
  rm -f "$SHARD_DIR"/kjv_train_*.bin
  "$PREPARE_TEXT" "$KJV_TXT" --out-dir "$SHARD_DIR" --name kjv --val-fraction "$VAL_FRACTION" \
    --shard-tokens "$SHARD_TOKENS" | sed 's/^/[prepare_data] /'
fi

# ---- Fashion-MNIST IDX files -> fmnist_train.h5, fmnist_test.h5, fmnist_train_10k.h5 ----------------
# Up to date when all three exist, are newer than the package's IDX files and the tool that wrote them, and
# h5dump (hdf5-tools) reads their /labels shape as the expected count; otherwise all three are rewritten
# (~1 s: each file is written as NAME.tmp and renamed, so an interrupted run leaves no half file).
fmnist_files=("$DATA_DIR/fmnist_train.h5" "$DATA_DIR/fmnist_test.h5" "$DATA_DIR/fmnist_train_10k.h5")
fmnist_counts=(60000 10000 "$FMNIST_SUBSET")
fmnist_fresh=1
for k in 0 1 2; do
  f=${fmnist_files[$k]}
  if [ ! -s "$f" ] || [ "$PREPARE_IMAGES" -nt "$f" ]; then fmnist_fresh=0; break; fi
  for src in "$FMNIST_SRC"/*; do
    [ "$src" -nt "$f" ] && fmnist_fresh=0
  done
  if command -v h5dump >/dev/null &&
     ! h5dump -H -d /labels "$f" 2>/dev/null | grep -q "SIMPLE { ( ${fmnist_counts[$k]} ) "; then
    fmnist_fresh=0
  fi
done
if [ "$fmnist_fresh" = 1 ]; then
  say "fmnist_train.h5, fmnist_test.h5, fmnist_train_10k.h5: up to date"
else
  "$PREPARE_IMAGES" fashion-mnist --src "$FMNIST_SRC" --out-dir "$DATA_DIR" --subset "$FMNIST_SUBSET" |
    sed 's/^/[prepare_data] /'
fi

# An ImageNet-shaped synthetic stand-in (3x224x224, 1000 classes; not ImageNet) for inputs/resnet50.toml: 256 + 64
# images, ~48 MB, from the counter-based RNG (reproducible, so existing files are kept).
if [ -f "$DATA_DIR/imagenet_synth_train.h5" ] && [ -f "$DATA_DIR/imagenet_synth_val.h5" ]; then
  say "imagenet_synth_train.h5, imagenet_synth_val.h5: up to date"
else
  "$PREPARE_IMAGES" synthetic --out-dir "$DATA_DIR" --name imagenet_synth | sed 's/^/[prepare_data] /'
fi

say "done in $(( SECONDS - start )) s: data in $DATA_DIR"
