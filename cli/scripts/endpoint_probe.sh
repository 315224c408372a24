#!/bin/sh
# doctor's policy endpoint probe, run by srun on a compute node (Go:
# endpointProbe, cli/cmd_doctor.go):
#   sh -c "$endpointProbe" sh URL PYTHON
# PYTHON is endpoint_probe.py's text (endpointProbePy), run when there is no
# curl. Prints the HTTP status URL answers with (000 from curl, or nothing
# and a traceback on stderr from python3, when it cannot connect).
if command -v curl >/dev/null; then curl -s -m 15 -o /dev/null -w '%{http_code}' "$1"; else python3 -c "$2" "$1"; fi
