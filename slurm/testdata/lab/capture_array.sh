#!/usr/bin/env bash
# Captures real sacct/squeue output of job arrays over their life, in the
# Client's layout (SacctFields, SqueueFields, --array, SLURM_BITSTR_LEN=0),
# for the parser tests (TestParseArrayCaptures). Run as root or the lab
# user, with the Slurm to capture on PATH and SLURM_CONF:
#   bash slurm/testdata/lab/capture_array.sh slurm/testdata/lab
#   PATH=/opt/nemorl-slurm-24.11/bin:$PATH SLURM_CONF=/etc/slurm-lab3/slurm.conf \
#     bash slurm/testdata/lab/capture_array.sh slurm/testdata/lab-24.11
# It submits three small arrays and takes about a minute:
#   A (0-3, held): task 2 exits 3, the others 0;
#   B (0-3): aftercorr on A, --kill-on-invalid-dep: B_2 is never satisfied;
#     B_1 is cancelled while pending;
#   C (0-2, held, --requeue): C_1 cancelled while still in the array's
#     pending record; once released, C_2 requeued while it runs.
# Files (PREFIX is sacct_array_ or squeue_array_): PREFIXpending.txt (A
# held and unsplit, B split out for its aftercorr dependency, C_1
# cancelled), squeue_array_pending_ranges.txt (the same without --array:
# A's record as one line "A_[0-3]"), PREFIXended.txt (A and B ended, B_2
# cancelled by Slurm), PREFIXrequeued.txt (C_2 requeued and pending
# again), array_ids.txt (the ids).
set -uo pipefail
out="${1:?usage: capture_array.sh DIR}"
work="$(mktemp -d /var/tmp/slurmcap.XXXXXX)"; chmod 777 "$work"
SEP=$'\x1f'
SACCT_FMT=JobIDRaw,JobID,JobName,State,ExitCode,Reason,Submit,Start,End,Elapsed,NodeList,User,TimelimitRaw,Comment
SQUEUE_FMT="%A=%i${SEP}%j${SEP}%T${SEP}%r${SEP}%V${SEP}%S${SEP}%e${SEP}%M${SEP}%N${SEP}%u${SEP}%l${SEP}%k"
O=(--output="$work/%A_%a.out" --time=5)

sacct_cap() { env SLURM_TIME_FORMAT=%s SLURM_BITSTR_LEN=0 sacct --duplicates --parsable2 --noheader --delimiter="$SEP" --format="$SACCT_FMT" --jobs="$1"; }
squeue_cap() { env SLURM_TIME_FORMAT=%s SLURM_BITSTR_LEN=0 squeue --noheader --states=all "${@:2}" --format="$SQUEUE_FMT" --jobs="$1"; }
# wait_split ID: until Slurm has split task ID (ARRAY_TASK) out of its
# array's pending record: its own job id (%A) is no longer the array's.
wait_split() {
    for _ in $(seq 120); do
        [ "$(squeue -h -r -t all -j "$1" -o %A 2>/dev/null)" != "${1%_*}" ] && return 0
        sleep 0.5
    done
    echo "capture_array.sh: $1 never split out" >&2
    exit 1
}
# wait_for ID STATE: until squeue shows task ID in STATE (60 s at most).
wait_for() {
    for _ in $(seq 120); do
        [ "$(squeue -h -r -t all -j "$1" -o %T 2>/dev/null)" = "$2" ] && return 0
        sleep 0.5
    done
    echo "capture_array.sh: $1 never $2" >&2
    exit 1
}

cat >"$work/a.sh" <<'EOF'
#!/bin/bash
sleep 3
[ "$SLURM_ARRAY_TASK_ID" = 2 ] && exit 3
exit 0
EOF
A=$(sbatch --parsable --array=0-3 --hold --job-name=cap-array-a --comment=cap-array "${O[@]}" "$work/a.sh")
# shellcheck disable=SC2016 # the job's own shell expands it
B=$(sbatch --parsable --array=0-3 --dependency=aftercorr:"$A" --kill-on-invalid-dep=yes \
    --job-name=cap-array-b --comment=cap-array "${O[@]}" --wrap='echo $SLURM_ARRAY_TASK_ID')
C=$(sbatch --parsable --array=0-2 --hold --requeue --job-name=cap-array-c --comment=cap-array "${O[@]}" --wrap='sleep 8')
echo "A=$A B=$B C=$C" >"$out/array_ids.txt"
wait_split "${B}_1"
scancel "${B}_1" "${C}_1"
sleep 3 # sacct's lag (22.05 records a pending job late)
all="$A,$B,$C"
sacct_cap "$all" >"$out/sacct_array_pending.txt"
squeue_cap "$all" --array >"$out/squeue_array_pending.txt"
squeue_cap "$all" >"$out/squeue_array_pending_ranges.txt"

scontrol release "$A"
wait_for "${B}_2" CANCELLED
wait_for "${B}_0" COMPLETED
wait_for "${B}_3" COMPLETED
sleep 3
sacct_cap "$A,$B" >"$out/sacct_array_ended.txt"
squeue_cap "$A,$B" --array >"$out/squeue_array_ended.txt"

scontrol release "$C"
wait_for "${C}_2" RUNNING
scontrol requeue "${C}_2"
wait_for "${C}_2" PENDING
sleep 3
sacct_cap "$C" >"$out/sacct_array_requeued.txt"
squeue_cap "$C" --array >"$out/squeue_array_requeued.txt"
scancel "$C"
rm -rf "$work"
