#!/usr/bin/env bash
# Captures real `sacct --batch-script` output (with and without --noheader)
# for ParseSacctBatchScript's golden tests, from the Slurm whose clients are
# on PATH (and SLURM_CONF), into DIR (default: the directory of this script;
# cluster 3's go to ../lab-24.11). As root:
#   bash slurm/testdata/lab/capture_batch_script.sh                     # cluster 1 (22.05)
#   PATH=/opt/nemorl-slurm-24.11/bin:$PATH SLURM_CONF=/etc/slurm-lab3/slurm.conf \
#     bash slurm/testdata/lab/capture_batch_script.sh slurm/testdata/lab-24.11
# Three jobs: a script ending in a newline, one without a final newline,
# and an srun allocation, which has no batch script (sacct prints NONE).
set -euo pipefail
here="${1:-$(cd "$(dirname "$0")" && pwd)}"
mkdir -p "$here"
work="$(mktemp -d /tmp/bscap.XXXXXX)"; chmod 755 "$work"
printf '#!/bin/bash\n# nemorl capture: final newline\ntrue\n' >"$work/nl.sh"
printf '#!/bin/bash\n# nemorl capture: no final newline\ntrue' >"$work/nonl.sh"
nl=$(sbatch --parsable --output="$work/%j.out" --job-name=cap-script-nl "$work/nl.sh")
nonl=$(sbatch --parsable --output="$work/%j.out" --job-name=cap-script-nonl "$work/nonl.sh")
# shellcheck disable=SC2016 # the job's own shell expands it
none=$(srun --job-name=cap-script-none sh -c 'echo $SLURM_JOB_ID')
for _ in $(seq 60); do # slurmdbd learns of the allocation a moment later
    [ -n "$(sacct --noheader -X --jobs="$none" --format=JobIDRaw)" ] && break
    sleep 1
done
# sacct says NONE for a few seconds after a job starts: wait for the scripts.
for _ in $(seq 120); do
    if ! sacct --batch-script --jobs="$nl" | grep -qx NONE && ! sacct --batch-script --jobs="$nonl" | grep -qx NONE &&
        sacct --noheader -X --jobs="$nonl" --format=End | grep -qv Unknown; then break; fi
    sleep 1
done
cp "$work/nl.sh" "$here/batch_script_nl.sh"
cp "$work/nonl.sh" "$here/batch_script_nonl.sh"
for c in nl nonl none; do
    id=${!c}
    echo "$id" >"$here/batch_script_$c.id"
    sacct --batch-script --jobs="$id" >"$here/batch_script_$c.sacct.txt"
    sacct --batch-script --noheader --jobs="$id" >"$here/batch_script_$c.noheader.txt"
done
sacct --version >"$here/batch_script_version.txt"
rm -rf "$work"
echo "captured into $here"
