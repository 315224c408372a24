#!/usr/bin/env bash
# Captures real sbatch/sacct/squeue output from the lab (lab/up) into this
# directory, for the parser tests. Run as the lab user or root:
#   bash slurm/testdata/lab/capture.sh
# It submits ~14 tiny jobs and takes about three minutes once they run.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d /tmp/slurmcap.XXXXXX)"; chmod 755 "$work"
SEP=$'\x1f'
# The client's layout (SacctFields, SqueueFields). The sacct_*/squeue_*
# files this script wrote were captured (as root) before User/%u and
# TimelimitRaw/%l joined it; the tests insert those columns when they read
# them (readCapture in parse_test.go).
SACCT_FMT=JobIDRaw,JobID,JobName,State,ExitCode,Reason,Submit,Start,End,Elapsed,NodeList,User,TimelimitRaw,Comment
SQUEUE_FMT="%A${SEP}%j${SEP}%T${SEP}%r${SEP}%V${SEP}%S${SEP}%e${SEP}%M${SEP}%N${SEP}%u${SEP}%l${SEP}%k"
O=(--output="$work/%j.out" --comment=capture)

sb() { # name, args… → prints the job id
    local name="$1"; shift
    sbatch --parsable --job-name="cap-$name" "${O[@]}" "$@"
}
sacct_cap() { env SLURM_TIME_FORMAT=%s sacct --parsable2 --noheader --delimiter="$SEP" --format="$SACCT_FMT" --jobs="$1"; }
squeue_cap() { env SLURM_TIME_FORMAT=%s squeue --noheader --states=all --format="$SQUEUE_FMT" --jobs="$1"; }
state() { squeue -h -t all -j "$1" -o %T 2>/dev/null; }

# sbatch itself: success and failures. (No option made 22.05 print a warning
# on success here; testdata/synthetic/sbatch_warning.* stands in.)
sbatch --parsable --job-name=cap-sbatch-ok "${O[@]}" --wrap=true >"$here/sbatch_ok.stdout" 2>"$here/sbatch_ok.stderr"
sbatch --parsable --job-name=cap-sbatch-fail "${O[@]}" --dependency=afterok:notajob --wrap=true \
    >"$here/sbatch_fail.stdout" 2>"$here/sbatch_fail.stderr"; echo "exit $?" >"$here/sbatch_fail.exit"
sbatch --parsable --job-name=cap-sbatch-mem "${O[@]}" --mem=999999999 --wrap=true \
    >"$here/sbatch_fail_mem.stdout" 2>"$here/sbatch_fail_mem.stderr"; echo "exit $?" >"$here/sbatch_fail_mem.exit"

ok=$(cat "$here/sbatch_ok.stdout")
exit3=$(sb exit3 --wrap='exit 3')
exit137=$(sb exit137 --wrap='exit 137')
sigkill=$(sb sigkill --wrap='kill -9 $$')
sigterm=$(sb sigterm --wrap='kill -TERM $$')
steps=$(sb steps --wrap='srun true; srun false; exit 0')
sleeper=$(sb sleeper --wrap='sleep 600')
timeout=$(sb timeout --time=1 --wrap='sleep 600')
dep=$(sb dep-on-sleeper --dependency=afterok:"$sleeper" --wrap=true)
blocked=$(sb blocked --dependency=afterok:"$exit3" --wrap=true)
held=$(sb held --hold --wrap=true)
c1=$(sb chain1 --wrap='exit 3')
c2=$(sb chain2 --kill-on-invalid-dep=yes --dependency=afterok:"$c1" --wrap=true)
c3=$(sb chain3 --kill-on-invalid-dep=yes --dependency=afterok:"$c2" --wrap=true)
all="$ok,$exit3,$exit137,$sigkill,$sigterm,$steps,$sleeper,$timeout,$dep,$blocked,$held,$c1,$c2,$c3"
cat >"$here/ids.txt" <<IDS
ok=$ok exit3=$exit3 exit137=$exit137 sigkill=$sigkill sigterm=$sigterm steps=$steps
sleeper=$sleeper timeout=$timeout dep=$dep blocked=$blocked held=$held chain=$c1,$c2,$c3
IDS
# Just submitted: sacct may not show them yet; pending with dependency.
sacct_cap "$all" >"$here/sacct_submitted.txt"
squeue_cap "$all" >"$here/squeue_submitted.txt"

# Wait for the sleeper to run.
for _ in $(seq 600); do [ "$(state "$sleeper")" = RUNNING ] && break; sleep 1; done
sleep 3
sacct_cap "$all" >"$here/sacct_running.txt"
squeue_cap "$all" >"$here/squeue_running.txt"
SLURM_TIME_FORMAT=standard sacct --parsable2 --noheader --delimiter="$SEP" --format="$SACCT_FMT" --jobs="$all" >"$here/sacct_running_standard_time.txt"

scancel "$sleeper"
# Wait for the timeout job to end, then snapshot squeue before MinJobAge drops it.
for _ in $(seq 300); do
    s=$(state "$timeout")
    case "$s" in TIMEOUT|FAILED|CANCELLED|COMPLETED) break ;; esac
    sleep 1
done
squeue_cap "$all" >"$here/squeue_ended.txt"
sleep 8 # let sacct catch up
sacct_cap "$all" >"$here/sacct_ended.txt"
scancel "$held" "$blocked" 2>"$here/scancel_cleanup.stderr"
scancel "$ok" 99999999 2>"$here/scancel_ended.stderr"; echo "exit $?" >"$here/scancel_ended.exit"
squeue --noheader --states=all --jobs=99999999 >"$here/squeue_unknown_single.stdout" 2>"$here/squeue_unknown_single.stderr"
echo "exit $?" >"$here/squeue_unknown_single.exit"
sleep 5
sacct_cap "$all" >"$here/sacct_final.txt"
sacct --version >"$here/version.txt"
rm -rf "$work"
echo "captured into $here"
