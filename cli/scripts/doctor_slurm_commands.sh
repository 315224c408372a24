#!/bin/sh
# doctor's "slurm commands" check, run on the login host as sh -c SCRIPT:
# prints each Slurm command the episodes use that is not on the PATH of a
# non-interactive login, one a line (nothing when all are there).
for c in sbatch sacct squeue scancel sinfo sacctmgr; do command -v "$c" >/dev/null 2>&1 || echo "$c"; done
