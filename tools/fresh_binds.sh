#!/bin/bash
# Lifts bind mounts that no longer show what their path names inside the chroot roots that
# shared/pythons/sid.sh, shared/pythons/arm64.sh and tools/oldglibc.sh use, so that their next
# run binds afresh.
#   tools/fresh_binds.sh [DIR] [ROOT ...]
# Those scripts bind the folder above the current directory into their root at the same path and
# keep a mount that is already there. When the clone they were run from is deleted and another
# one made at the same path (CI makes a fresh clone per run), the old mount still shows the
# deleted folder (its source reads "//deleted" in /proc/self/mountinfo): inside the root the new
# clone is missing and the command fails with "cd: ...: No such file or directory". This lifts,
# in each ROOT (default: $SID_ROOT, $ARM64_ROOT, $OLDGLIBC_ROOT or their defaults /opt/sid,
# /opt/arm64, /opt/bullseye; roots that do not exist are skipped):
#   - every mount whose source folder was deleted;
#   - the mount at ROOT/DIR (DIR: default the folder above the current directory) when it is not
#     DIR itself (another folder, or one deleted and made again).
# Mounts are lifted lazily (umount -l): a process still inside one keeps it. Needs root to lift
# anything; without root, or with nothing stale, it does nothing. Exit status 0.
set -uo pipefail
dir=${1:-$(dirname "$(pwd)")}
[ $# -gt 0 ] && shift
roots=("$@")
[ ${#roots[@]} -gt 0 ] || roots=("${SID_ROOT:-/opt/sid}" "${ARM64_ROOT:-/opt/arm64}" "${OLDGLIBC_ROOT:-/opt/bullseye}")
[ "$(id -u)" = 0 ] || exit 0
for root in "${roots[@]}"; do
  root=${root%/}
  [ -d "$root" ] || continue
  # mount points under the root whose source was deleted, deepest first (mountinfo: field 4 is
  # the source's path in its file system, field 5 the mount point; spaces are written \040)
  awk -v r="$root/" 'index($5, r) == 1 && $4 ~ /\/\/deleted$/ { print $5 }' /proc/self/mountinfo |
    sort -r | while read -r m; do
      m=$(printf '%b' "$m")
      echo "fresh_binds: lifting $m (its folder was deleted)" >&2
      umount -l "$m" 2>/dev/null || true
    done
  if mountpoint -q "$root$dir" 2>/dev/null &&
     [ "$(stat -c %d:%i "$dir" 2>/dev/null)" != "$(stat -c %d:%i "$root$dir" 2>/dev/null)" ]; then
    echo "fresh_binds: lifting $root$dir (it shows another folder than $dir)" >&2
    umount -l "$root$dir" 2>/dev/null || true
  fi
done
exit 0
