#!/usr/bin/env python3
# doctor's policy endpoint probe where there is no curl (Go: endpointProbePy,
# cli/cmd_doctor.go), run by endpoint_probe.sh as: python3 -c PROGRAM URL.
# Prints the HTTP status URL answers with; a connection error is a traceback.
import sys,urllib.request,urllib.error
try: print(urllib.request.urlopen(sys.argv[1], timeout=15).status)
except urllib.error.HTTPError as e: print(e.code)
