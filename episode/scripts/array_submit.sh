#!/bin/sh
# Submits one job array of train or eval tasks and writes each task's
# episode manifest with the task's job id (Go: arraySubmitScript,
# episode/stage_array.go):
#   sh -c "$arraySubmitScript" sh SCRIPT N {TASK MANIFEST}... SBATCH ARGV...
# with, on stdin, N manifest lines (each with @NEMORL_JOB_ID@ where its
# task's id goes, in the order of the TASK MANIFEST pairs) and then the
# array's batch script, which is written to SCRIPT (its directory made)
# before SBATCH ARGV runs (the script's path last in ARGV). Prints
# sbatch's output; exits with sbatch's status when it fails, 91 when
# SCRIPT could not be written, else 0.
set -u
umask 077
# The tool may go away while this runs (killed, its connection lost): the
# task ids still reach the manifests, which adopt reads back after a
# crash (ManifestJobWait); a write to a closed stdout fails instead of
# killing the script.
trap '' HUP PIPE
script=$1 n=$2
shift 2
j=0
while [ $j -lt "$n" ]; do
	# shellcheck disable=SC2034 # line is read by the eval below
	IFS= read -r line || exit 91
	eval "task_$j=\$1 path_$j=\$2 line_$j=\$line"
	shift 2
	j=$((j + 1))
done
mkdir -p -- "${script%/*}" || exit 91
tmp=$script.tmp.$$
if ! cat >"$tmp" || ! mv -f -- "$tmp" "$script"; then
	rm -f -- "$tmp"
	exit 91
fi
out=$("$@" </dev/null)
rc=$?
if [ $rc -ne 0 ]; then
	printf '%s\n' "$out"
	exit $rc
fi
id=
while IFS= read -r l; do
	w=${l%%;*}
	case $w in '' | *[!0-9]*) ;; *) id=$w ;; esac
done <<END
$out
END
if [ -n "$id" ]; then
	j=0
	while [ $j -lt "$n" ]; do
		eval "task=\$task_$j p=\$path_$j m=\$line_$j"
		# shellcheck disable=SC2154 # task, p and m are set by the eval above
		printf '%s\n' "${m%%@NEMORL_JOB_ID@*}${id}_$task${m#*@NEMORL_JOB_ID@}" >"$p"
		j=$((j + 1))
	done
fi
printf '%s\n' "$out"
exit 0
