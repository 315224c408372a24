#!/bin/sh
# Reads a stage's output for nemorl-slurm logs (Go: followScript,
# cli/cmd_logs.go):
#   sh -c "$followScript" sh FILE OFFSET N
# Prints "absent" when FILE does not exist; else FILE's size on one line,
# then its bytes from OFFSET to that size (OFFSET -1: its last N bytes).
# Exit 3 (message on stderr): FILE is not a regular file, or stat failed.
f=$1 off=$2 n=$3
[ -e "$f" ] || [ -L "$f" ] || { echo absent; exit 0; }
# shellcheck disable=SC2015 # either test failing means not a regular file
[ -f "$f" ] && [ ! -L "$f" ] || { echo "not a regular file" >&2; exit 3; }
exec 3<>"$f"
st=$(LC_ALL=C stat -L -c '%F|%i|%s' /dev/fd/3) || exit 3
ino=$(LC_ALL=C stat -c '%i' -- "$f") || exit 3
case $st in "regular file|$ino|"* | "regular empty file|$ino|"*) ;; *) echo "not a regular file" >&2; exit 3 ;; esac
size=${st##*|}
echo "$size"
if [ "$off" -lt 0 ]; then tail -c "$n" <&3
elif [ "$size" -gt "$off" ]; then tail -c +$((off + 1)) <&3 | head -c $((size - off))
fi
