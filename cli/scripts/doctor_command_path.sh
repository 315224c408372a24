#!/bin/sh
# doctor's "runtime" check, run on the login host as sh -c SCRIPT sh
# BINARY: prints where BINARY (runtime.binary) is found on the PATH of a
# non-interactive login; fails (nothing printed) when it is not.
command -v "$1"
