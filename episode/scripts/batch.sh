#!/bin/sh
# Stages episodes and submits their author jobs in one command (Go:
# batchScript, episode/stage.go, which documents it in full):
#   sh -c "$batchScript" sh PARENT MODE GAP DEADLINE NCHECKS KEY=PATH... NEPS {EP NAME COMMENT SCRIPT}... [SBATCH ARGV...]
# with the episodes' trees as one gzipped tar stream on stdin (MODE new,
# array or restage; array: one sbatch of a job array for all, NAME holding
# each episode's task index). Prints one
# tab-separated line per event: "nemorl-batch EP staged|exists|failed",
# "nemorl-batch EP sbatch RC", "nemorl-batch EP out LINE" (RC 124 or 137:
# sbatch stopped at its DEADLINE, seconds; 0: none), and for each sbatch
# run "nemorl-sbatch MS RC" (how long it took, in milliseconds; empty
# where /proc/uptime cannot be read). Exit 90: a preflight file is missing
# (named on stderr); 92: mkdir, mktemp or tar failed.
set -uf
# The tool may go away while this runs (killed, its connection lost): the
# job ids still reach the manifests, which adopt reads back after a
# crash (ManifestJobWait); a write to a closed stdout fails instead of
# killing the script.
trap '' HUP PIPE
umask 077
# now: cs=the uptime in centiseconds (/proc/uptime: "12345.67 …"), read
# without starting a process; empty where it cannot be read.
now() {
	cs=
	read -r u _ 2>/dev/null </proc/uptime || return 0
	case $u in
	*[!0-9.]* | .* | *.*.*) ;;
	*.[0-9][0-9]) c=${u#*.} && cs=$((${u%.*} * 100 + ${c#0})) ;;
	esac
}
# took T0: ms=the milliseconds from uptime T0 (centiseconds) to now;
# empty when either is unknown.
took() {
	now
	ms=
	[ -z "$1" ] || [ -z "$cs" ] || ms=$(((cs - $1) * 10))
}
parent=$1 mode=$2 gap=$3 deadline=$4 n=$5
shift 5
while [ "$n" -gt 0 ]; do
	k=${1%%=*} p=${1#*=}
	shift
	n=$((n - 1))
	if [ -d "$p" ]; then r="is a directory"
	elif [ ! -e "$p" ]; then r="no such file or directory"
	elif [ ! -r "$p" ]; then r="permission denied"
	else continue
	fi
	printf 'nemorl-stage: preflight\t%s\t%s\t%s\n' "$k" "$p" "$r" >&2
	exit 90
done
neps=$1
shift
j=0
while [ $j -lt "$neps" ]; do
	eval "ep_$j=\$1 name_$j=\$2 comment_$j=\$3 script_$j=\$4"
	shift 4
	j=$((j + 1))
done
[ -d "$parent" ] || mkdir -p -- "$parent" || exit 92
tmp=$(mktemp -d -- "$parent/.staging.XXXXXX") || exit 92
trap 'rm -rf -- "$tmp"' EXIT
tar -x -z -p --no-same-owner -f - -C "$tmp" || exit 92
sync -f -- "$tmp" 2>/dev/null || sync
# Episode ids are words of [A-Za-z0-9._-]: a list of them splits safely.
move=
j=0
while [ $j -lt "$neps" ]; do
	eval "ep=\$ep_$j"
	if [ -e "$parent/$ep" ] || [ -L "$parent/$ep" ]; then
		if [ "$mode" = restage ] && [ -d "$parent/$ep" ] && [ ! -L "$parent/$ep" ] && [ -f "$parent/$ep/manifest.json" ]; then
			printf 'nemorl-batch\t%s\tstaged\n' "$ep"
		else
			printf 'nemorl-batch\t%s\texists\n' "$ep"
		fi
		eval "ep_$j="
	else
		move="$move $ep"
	fi
	j=$((j + 1))
done
if [ -n "$move" ]; then
	# shellcheck disable=SC2086 # $move is the list to split (set -f: no globbing)
	(cd -- "$tmp" && mv -t "$parent" -- $move) 2>/dev/null
fi
j=0
while [ $j -lt "$neps" ]; do
	eval "ep=\$ep_$j"
	if [ -n "$ep" ]; then
		if [ -d "$parent/$ep" ] && [ ! -e "$tmp/$ep" ]; then
			printf 'nemorl-batch\t%s\tstaged\n' "$ep"
		else
			printf 'nemorl-batch\t%s\tfailed\n' "$ep"
			eval "ep_$j="
		fi
	fi
	j=$((j + 1))
done
[ $# -gt 0 ] || exit 0
if [ "$mode" = array ]; then
	# One sbatch for every staged episode: a job array whose task NAME (an
	# episode's tuple holds its task index there, and the array's SCRIPT;
	# COMMENT is unused: the array's name and comment are in SBATCH ARGV)
	# runs the episode, the array's script staged from the stream's
	# .arrays/. The tasks of episodes not staged are left out of --array.
	tasks=
	j=0
	while [ $j -lt "$neps" ]; do
		eval "ep=\$ep_$j task=\$name_$j script=\$script_$j"
		# shellcheck disable=SC2154 # task is set by the eval above
		[ -z "$ep" ] || tasks="$tasks,$task"
		j=$((j + 1))
	done
	[ -n "$tasks" ] || exit 0
	# shellcheck disable=SC2154 # script is set by the eval above
	adir=${script%/*}
	mkdir -p -- "$parent/.arrays" || exit 92 # -p: two batches at once make it
	mv -- "$tmp/.arrays/${adir##*/}" "$parent/.arrays/" || exit 92
	mkdir -- "$tmp/.res" || exit 92
	now
	t0=$cs
	timeout --foreground -k 5 "$deadline" "$@" --array="${tasks#,}" "$script" >"$tmp/.res/array" 2>&1 </dev/null
	rc=$?
	took "$t0"
	printf 'nemorl-sbatch\t%s\t%s\n' "$ms" "$rc"
	id=
	while IFS= read -r line || [ -n "$line" ]; do
		w=${line%%;*}
		case $w in '' | *[!0-9]*) ;; *) id=$w ;; esac
	done <"$tmp/.res/array"
	j=0
	while [ $j -lt "$neps" ]; do
		eval "ep=\$ep_$j task=\$name_$j"
		j=$((j + 1))
		[ -n "$ep" ] || continue
		printf 'nemorl-batch\t%s\tsbatch\t%s\n' "$ep" "$rc"
		while IFS= read -r line || [ -n "$line" ]; do
			printf 'nemorl-batch\t%s\tout\t%s\n' "$ep" "$line"
		done <"$tmp/.res/array"
		if [ "$rc" = 0 ] && [ -n "$id" ] && IFS= read -r m <"$tmp/.next/$ep"; then
			printf '%s\n' "${m%%@NEMORL_JOB_ID@*}${id}_$task${m#*@NEMORL_JOB_ID@}" >"$parent/$ep/manifest.json"
		fi
	done
	exit 0
fi
# sbatch four at a time (with a GAP other than 0: one at a time, GAP
# seconds between starts, cluster.submit_rate), each writing its status
# and output beside the trees; then the manifests and the report. Each
# sbatch is stopped at DEADLINE (SIGTERM, SIGKILL 5 s later: timeout exits
# 124 or 137), its outcome unknown; --foreground keeps it in the batch's
# process group, which the batch's own deadline kills.
mkdir -- "$tmp/.res" || exit 92
j=0
k=0
started=0
while [ $j -lt "$neps" ]; do
	eval "ep=\$ep_$j name=\$name_$j comment=\$comment_$j script=\$script_$j"
	j=$((j + 1))
	[ -n "$ep" ] || continue
	if [ "$gap" != 0 ]; then
		[ $started -eq 0 ] || sleep "$gap"
		started=1
		k=3 # the wait below: one sbatch at a time
	fi
	(
		now
		t0=$cs
		# shellcheck disable=SC2154 # name, comment and script are set by the eval above
		timeout --foreground -k 5 "$deadline" "$@" --job-name="$name" --comment="$comment" "$script" >"$tmp/.res/$ep" 2>&1 </dev/null
		rc=$?
		took "$t0"
		echo "$rc $ms" >"$tmp/.res/$ep.rc"
	) &
	k=$((k + 1))
	if [ $k -ge 4 ]; then
		wait
		k=0
	fi
done
wait
j=0
while [ $j -lt "$neps" ]; do
	eval "ep=\$ep_$j"
	j=$((j + 1))
	[ -n "$ep" ] || continue
	rc='' ms=''
	read -r rc ms <"$tmp/.res/$ep.rc"
	printf 'nemorl-sbatch\t%s\t%s\n' "$ms" "${rc:-255}"
	printf 'nemorl-batch\t%s\tsbatch\t%s\n' "$ep" "${rc:-255}"
	id=
	while IFS= read -r line || [ -n "$line" ]; do
		printf 'nemorl-batch\t%s\tout\t%s\n' "$ep" "$line"
		w=${line%%;*}
		case $w in '' | *[!0-9]*) ;; *) id=$w ;; esac
	done <"$tmp/.res/$ep"
	if [ "$rc" = 0 ] && [ -n "$id" ] && IFS= read -r m <"$tmp/.next/$ep"; then
		printf '%s\n' "${m%%@NEMORL_JOB_ID@*}$id${m#*@NEMORL_JOB_ID@}" >"$parent/$ep/manifest.json"
	fi
done
exit 0
