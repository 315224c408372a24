#!/bin/sh
# Renames each SRC DST pair whose SRC exists, never following it, never
# into a directory (Go: moveAsideScript, episode/retry.go):
#   sh -c "$moveAsideScript" sh SRC DST [SRC DST]...
# Prints nothing; exit 1 when a mv fails.
while [ $# -ge 2 ]; do
	if [ -e "$1" ] || [ -L "$1" ]; then mv -fT -- "$1" "$2" || exit 1; fi
	shift 2
done
