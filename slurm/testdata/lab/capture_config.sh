#!/usr/bin/env bash
# Captures real `scontrol show config` output for ParseConfig's tests, from
# the Slurm whose clients are on PATH (and SLURM_CONF), into DIR (default:
# the directory of this script; cluster 3's go to ../lab-24.11). As root:
#   bash slurm/testdata/lab/capture_config.sh                           # cluster 1 (22.05)
#   PATH=/opt/nemorl-slurm-24.11/bin:$PATH SLURM_CONF=/etc/slurm-lab3/slurm.conf \
#     bash slurm/testdata/lab/capture_config.sh slurm/testdata/lab-24.11
# The two captures (scontrol_show_config.txt here and in ../lab-24.11) show
# the same layout, keys added and dropped between the releases, and 24.11's
# rl_enable in SlurmctldParameters (config_test.go).
set -euo pipefail
here="${1:-$(cd "$(dirname "$0")" && pwd)}"
mkdir -p "$here"
scontrol show config >"$here/scontrol_show_config.txt"
echo "captured into $here/scontrol_show_config.txt ($(scontrol --version))"
