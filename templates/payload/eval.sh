#!/bin/bash
# nemorl-slurm built-in eval payload.
#
# Not in this build yet: the real payload (the issue on the real stage
# payloads and images) replaces
# this file. Until then a config must name a stand-in with
# stages.eval.command, as configs/lab.yaml does; this refuses to pretend.
set -euo pipefail
echo "nemorl: the built-in eval payload is not implemented in this build; set stages.eval.command" >&2
exit 78
