#!/bin/sh
# Inspects a stage's output file where it lies and sends back its record
# lines (Go: collectScript, episode/files.go, which documents it in full):
#   sh -c "$collectScript" sh FILE WINDOW [findings]
# Prints "nemorl-collect absent|lstat F|s|Z|i|h|unopenable|replaced|tail START",
# after "tail START" the grep -n -b lines of the last WINDOW bytes that start
# with NEMORL_ENV_ (and, with findings, "nemorl: isolation: "). Exit 93: stat failed.
set -u
LC_ALL=C
export LC_ALL
f=$1 n=$2 mode=${3:-}
fmt='%F|%s|%Z|%i|%h'
if ! [ -e "$f" ] && ! [ -L "$f" ]; then
	echo 'nemorl-collect absent'
	exit 0
fi
opened=0
if [ -f "$f" ] && [ ! -L "$f" ] && (exec 3<>"$f") 2>/dev/null; then
	exec 3<>"$f" && opened=1
fi
l=$(stat --printf="$fmt" -- "$f") || exit 93
printf 'nemorl-collect lstat %s\n' "$l"
case $l in
"regular file|"* | "regular empty file|"*) ;;
*) exit 0 ;;
esac
if [ $opened = 0 ]; then
	echo 'nemorl-collect unopenable'
	exit 0
fi
o=$(stat -L --printf="$fmt" /dev/fd/3) || exit 93
if [ "${o#*|*|*|}" != "${l#*|*|*|}" ]; then
	echo 'nemorl-collect replaced'
	exit 0
fi
rest=${o#*|}
size=${rest%%|*}
start=0
[ "$size" -gt "$n" ] && start=$((size - n))
printf 'nemorl-collect tail %s\n' "$start"
if [ "$mode" = findings ]; then
	tail -c "$n" <&3 | grep -a -n -b -e '^NEMORL_ENV_' -e '^nemorl: isolation: '
else
	tail -c "$n" <&3 | grep -a -n -b '^NEMORL_ENV_'
fi
exit 0
