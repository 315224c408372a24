#!/bin/sh
# doctor's "workdir" check, run on the login host as sh -c SCRIPT sh
# WORKDIR: makes WORKDIR, checks that it is writable and prints its free
# space in KiB; fails (nothing printed) when it cannot be made or written.
mkdir -p -- "$1" && test -w "$1" && df -Pk -- "$1" | awk 'NR == 2 { print $4 }'
