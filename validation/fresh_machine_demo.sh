#!/usr/bin/env bash
# Times README command 1 (`bash scripts/demo.sh`) on a fresh Debian 12: a debootstrap'ed chroot (variant minbase,
# nothing of hpctrain's installed), the repository cloned into it from this checkout's HEAD, then its parts one after
# the other, as a user's first run does them: packages (scripts/setup.sh), build (scripts/build.sh --apps), data
# (scripts/prepare_data.sh), training (scripts/demo.sh, whose other steps are then no-ops), to its PERFORMANCE line.
#
#   sudo bash validation/fresh_machine_demo.sh [ROOT]     ROOT: the chroot (default /srv/hpct_fresh; ~4 GB)
#
# Run as root on a Debian 12 host with network access to the Debian mirror, on an otherwise idle machine (the times
# are the point). Prints one `TIME <part> : <seconds>` line per part and the demo's PERFORMANCE line; the full log is
# ROOT.log. The chroot uses the host's kernel and CPU, and its apt sources are the host's (bookworm, updates,
# security), as a cloud image's would be. It is left in place (unmounted) for inspection: remove it with rm -rf ROOT.
set -euo pipefail
root="${1:-/srv/hpct_fresh}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log="$root.log"
[ "$(id -u)" = 0 ] || { echo "fresh_machine_demo: run as root (debootstrap, chroot, mount)" >&2; exit 2; }
command -v debootstrap >/dev/null || { apt-get update -q && apt-get install -y -q debootstrap; }

if [ ! -x "$root/usr/bin/apt-get" ]; then
  echo "[fresh] debootstrap bookworm (minbase) into $root (not timed)"
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian > "$log.debootstrap" 2>&1
fi
mounts=(proc sys dev dev/pts dev/shm)
cleanup() {
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    mountpoint -q "$root/${mounts[$i]}" && umount "$root/${mounts[$i]}"
  done
  return 0
}
trap cleanup EXIT
for d in "${mounts[@]}"; do mountpoint -q "$root/$d" || mount --bind "/$d" "$root/$d"; done
cp /etc/resolv.conf "$root/etc/resolv.conf"
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
  cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/debian.sources"
  rm -f "$root/etc/apt/sources.list"
fi
rm -rf "$root/root/hpctrain"
git clone -q "$repo" "$root/root/hpctrain"
echo "[fresh] $(git -C "$repo" rev-parse --short HEAD) cloned; timing the parts (log: $log)"

cat > "$root/root/time_demo.sh" << 'INNER'
set -euo pipefail
cd /root/hpctrain
: > /root/times.txt
part() {
  local start end
  start=$(date +%s.%N)
  "$@"
  end=$(date +%s.%N)
  awk -v s="$start" -v e="$end" -v what="$*" 'BEGIN { printf "TIME %s : %.1f\n", what, e - s }' >> /root/times.txt
}
part bash scripts/setup.sh
part bash scripts/build.sh --apps
part bash scripts/prepare_data.sh
part bash scripts/demo.sh
INNER
chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin bash /root/time_demo.sh > "$log" 2>&1
cat "$root/root/times.txt"
awk '/^TIME/ { s += $NF } END { printf "TIME total : %.1f\n", s }' "$root/root/times.txt"
grep "^PERFORMANCE [0-9]" "$log" | tail -1
