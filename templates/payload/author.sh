#!/bin/bash
# nemorl-slurm built-in author payload.
#
# Not in this build yet: the real payload (the issue on the real stage
# payloads and images) replaces
# this file. Until then a config must name a stand-in with
# stages.author.command, as configs/lab.yaml does; this refuses to pretend.
set -euo pipefail
echo "nemorl: the built-in author payload is not implemented in this build; set stages.author.command" >&2
exit 78
