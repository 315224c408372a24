#!/bin/bash
# nemorl-slurm isolation guard. In container mode the batch script runs it
# inside the stage's container, through an exec line with exactly the
# payload's flags, binds and environment (only the command differs), before
# the payload. It exits 0 only when it finds no way from the container to
# Slurm; otherwise it prints one "nemorl: isolation: <what>" line per finding
# to stderr and exits 69, and the payload never starts (the script turns any
# non-zero status of the guard into its own exit 69). With runtime.kind none
# no guard runs: nothing isolates the payload.
#
# usage: guard.sh [--root DIR] [--proc DIR] [--host-network] STAGE
#        (STAGE: author|train|eval)
#
# --root (default /) is the filesystem scanned and --proc (default /proc) the
# proc tree read. They exist for tests, which point them at fake trees; they
# are command-line options only and no environment variable is read for
# them, so nothing in a stage's environment can redirect the scan.
#
# Refused on every stage:
# - a mount point in /proc/self/mountinfo outside the allowlist: /; /tmp,
#   /var/tmp; /etc/{passwd,group,hosts,localtime,resolv.conf,hostname};
#   anything under /dev, /proc, /sys, /.singularity.d (where Apptainer puts
#   the --nv libraries); the stage's binds (author: /nemorl/author; train and
#   eval: /nemorl/bundle, /nemorl/out and one regular file directly in
#   /nemorl/in); on train and eval (--nv) also regular files /usr/bin/nvidia-*
#   and NVIDIA/CUDA libraries (libcuda*, libnvidia-*, libnvcuvid*, libnvoptix*,
#   lib{GLX,EGL,GLESv1_CM,GLESv2,vdpau}_nvidia*, all .so*) directly in
#   /usr/lib, /usr/lib32, /usr/lib64 or /usr/lib/<arch>-linux-gnu. A mount
#   point with an escaped character (\040 ...) never matches. Firmware and
#   anything else nvidia-container-cli may add are refused: conservative;
# - any unix socket file anywhere in the filesystem (walking /, /proc and
#   /sys pruned but for mounts below them): munge's and slurmrestd's
#   sockets, and any other (on a GPU node where --nv binds
#   nvidia-persistenced's socket, that one too);
# - SLURM_CONF, SLURM_JWT or any SLURMRESTD_* variable set;
# - a Slurm client (sbatch scontrol scancel srun salloc squeue sacct) in a
#   PATH directory or in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin
#   /sbin /bin;
# - /etc/slurm, /run/munge, /var/run/munge or /etc/munge present;
# and on train and eval (--net --network none):
# - any network interface but lo in /proc/net/dev; not with --host-network,
#   which the script passes when stages.<stage>.network is true (the site
#   gave the stage the host network on purpose).
# The author keeps the host network (it must reach the policy endpoint), so
# abstract-namespace sockets and TCP are out of this guard's reach there;
# Slurm's daemons authenticate with munge, whose socket is checked above.
set -uo pipefail

usage() {
  echo "nemorl: isolation: guard usage: guard.sh [--root DIR] [--proc DIR] [--host-network] author|train|eval" >&2
  exit 64
}

root=/ proc=/proc hostnet=0
while [ $# -gt 0 ]; do
  case $1 in
    --root) [ $# -ge 2 ] || usage; root=$2; shift 2 ;;
    --proc) [ $# -ge 2 ] || usage; proc=$2; shift 2 ;;
    --host-network) hostnet=1; shift ;;
    --) shift; break ;;
    -*) usage ;;
    *) break ;;
  esac
done
[ $# -eq 1 ] || usage
stage=$1
case $stage in
  author) gpu=0 ;;
  train | eval) gpu=1 ;;
  *) usage ;;
esac
case $root in /*) ;; *) usage ;; esac
r=${root%/} # prefix for absolute paths: empty when scanning /

found=0
refuse() {
  echo "nemorl: isolation: $*" >&2
  found=1
}

# regular FILE under r: a regular file, not a symlink.
regular() { [ -f "$r$1" ] && [ ! -L "$r$1" ]; }

allowed_mount() {
  local mp=$1 dir base
  case $mp in
    *\\*) return 1 ;;
    / | /tmp | /var/tmp) return 0 ;;
    /etc/passwd | /etc/group | /etc/hosts | /etc/localtime | /etc/resolv.conf | /etc/hostname) return 0 ;;
    /dev | /dev/* | /proc | /proc/* | /sys | /sys/* | /.singularity.d | /.singularity.d/*) return 0 ;;
  esac
  case $stage:$mp in
    author:/nemorl/author) return 0 ;;
    train:/nemorl/bundle | train:/nemorl/out | eval:/nemorl/bundle | eval:/nemorl/out) return 0 ;;
    train:/nemorl/in/* | eval:/nemorl/in/*)
      case ${mp#/nemorl/in/} in */* | '') return 1 ;; esac
      regular "$mp"
      return
      ;;
  esac
  [ "$gpu" = 1 ] || return 1
  dir=${mp%/*} base=${mp##*/}
  case $dir in
    /usr/bin)
      case $base in nvidia-*) regular "$mp"; return ;; esac
      ;;
    /usr/lib | /usr/lib32 | /usr/lib64 | /usr/lib/x86_64-linux-gnu | /usr/lib/aarch64-linux-gnu | /usr/lib/powerpc64le-linux-gnu)
      case $base in
        libcuda*.so* | libnvidia-*.so* | libnvcuvid*.so* | libnvoptix*.so* | libGLX_nvidia*.so* | libEGL_nvidia*.so* | \
          libGLESv1_CM_nvidia*.so* | libGLESv2_nvidia*.so* | libvdpau_nvidia*.so*)
          regular "$mp"
          return
          ;;
      esac
      ;;
  esac
  return 1
}

# 1. Mounts. Those under /proc and /sys are allowed, but the socket walk
# below prunes /proc and /sys: it walks each of them separately.
inner=()
if [ -r "$proc/self/mountinfo" ]; then
  while read -r _ _ _ _ mp _; do
    allowed_mount "$mp" || refuse "mount point $mp is not allowed in the $stage container"
    case $mp in /proc/* | /sys/*) inner+=("$r$mp") ;; esac
  done < "$proc/self/mountinfo"
else
  refuse "cannot read $proc/self/mountinfo"
fi

# 2. Unix sockets, anywhere reachable (directories the user cannot list are
# not walked).
if command -v find > /dev/null; then
  n=0
  while IFS= read -r s; do
    n=$((n + 1))
    [ "$n" -le 10 ] && refuse "unix socket ${s#"$r"}"
  done < <(
    find "${r:-/}" \( -path "$r/proc" -o -path "$r/sys" \) -prune -o -type s -print 2> /dev/null
    [ "${#inner[@]}" = 0 ] || find "${inner[@]}" -xdev -type s -print 2> /dev/null
  )
  [ "$n" -le 10 ] || refuse "$((n - 10)) more unix sockets"
else
  refuse "cannot look for unix sockets: no find(1) in the image"
fi

# 3. Network interfaces (train and eval run with --net --network none).
if [ "$stage" != author ] && [ "$hostnet" = 0 ]; then
  if [ -r "$proc/net/dev" ]; then
    while IFS= read -r line; do
      case $line in *:*) ;; *) continue ;; esac # the two header lines
      name=${line%%:*}
      name=${name//[[:space:]]/}
      [ "$name" = lo ] || refuse "network interface $name (want only lo)"
    done < "$proc/net/dev"
  else
    refuse "cannot read $proc/net/dev"
  fi
fi

# 4. Slurm's configuration and credentials in the environment.
for v in SLURM_CONF SLURM_JWT ${!SLURMRESTD@}; do
  [ -n "${!v+set}" ] && refuse "environment variable $v is set"
done

# 5. Slurm clients.
declare -A seen=()
IFS=: read -r -a path_dirs <<< "${PATH:-}"
for d in ${path_dirs[@]+"${path_dirs[@]}"} /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
  case $d in /*) ;; *) continue ;; esac
  [ -z "${seen[$d]:-}" ] || continue
  seen[$d]=1
  for c in sbatch scontrol scancel srun salloc squeue sacct; do
    if [ -e "$r$d/$c" ] || [ -L "$r$d/$c" ]; then
      refuse "Slurm client $d/$c"
    fi
  done
done

# 6. Slurm and munge configuration and sockets.
for p in /etc/slurm /run/munge /var/run/munge /etc/munge; do
  if [ -e "$r$p" ] || [ -L "$r$p" ]; then
    refuse "$p is present"
  fi
done

if [ "$found" != 0 ]; then
  exit 69
fi
echo "nemorl: guard: no way to Slurm found in the $stage container" >&2
exit 0
