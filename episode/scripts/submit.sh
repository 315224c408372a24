#!/bin/sh
# Submits one job and rewrites its manifest with the new job id (Go:
# submitScript, episode/stage.go):
#   sh -c "$submitScript" sh MANIFEST PRE POST SBATCH ARGV...
# Prints sbatch's output; on success writes PRE ID POST to MANIFEST. Exits
# with sbatch's status when it fails, else 0.
set -u
# The tool may go away while this runs (killed, its connection lost): the
# job ids still reach the manifests, which adopt reads back after a
# crash (ManifestJobWait); a write to a closed stdout fails instead of
# killing the script.
trap '' HUP PIPE
umask 077
m=$1 pre=$2 post=$3
shift 3
out=$("$@" </dev/null)
rc=$?
printf '%s\n' "$out"
[ $rc -eq 0 ] || exit $rc
id=
while IFS= read -r line; do
	w=${line%%;*}
	case $w in '' | *[!0-9]*) ;; *) id=$w ;; esac
done <<EOF
$out
EOF
[ -n "$id" ] && printf '%s%s%s\n' "$pre" "$id" "$post" >"$m"
exit 0
