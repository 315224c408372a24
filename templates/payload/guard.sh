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
# - a mount point in /proc/self/mountinfo that is not in the allowlist
#   below (allowed_mount), and any mount point that is a unix socket, what
#   the allowlist says notwithstanding, but nvidia-persistenced's at exactly
#   its path on train and eval: `find -type s` never sees a socket bound
#   onto a placeholder file, `[ -S ]` on the mount point does. A mount point
#   with an escaped character (\040 ...) never matches. Each finding names
#   the setting that can produce it (a site bind, apptainer.conf's `mount
#   hostfs`, `always use nv`, --nv);
# - any other unix socket file anywhere in the filesystem (walking /, /proc
#   and /sys pruned but for mounts below them): munge's and slurmrestd's;
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
#
# The allowlist, in one place (allowed_mount), each entry with the
# Apptainer 1.5.3 source it comes from:
#   every stage (what `exec --containall` itself mounts):
#     /  /tmp  /var/tmp          the image, and --workdir's /tmp and /var/tmp
#     /etc/{passwd,group,hosts,localtime,resolv.conf,hostname}   regular
#                                files (engine/apptainer/container_linux.go:
#                                addFilesMount, the *Tag mounts)
#     /proc /proc/* /sys /sys/*  (addKernelMount)
#     /dev: the session /dev of --contain (container_linux.go addDevMount):
#       the directory, /dev/{pts,shm,mqueue} directories and the character
#       devices /dev/{tty,console,null,zero,full,random,urandom}
#   train and eval only (--nv: util/gpu/nvidia_legacy.go, and the
#   runtime's setNVLegacyConfig and addGPUBinds):
#     /dev/nvidia*: character devices (NvidiaDevices' glob), /dev/nvidia-caps
#       a directory with character devices in it
#     /usr/bin/<binary>: regular files, the binaries nvliblist.conf names
#       (nvidia-smi nvidia-debugdump nvidia-persistenced
#       nvidia-cuda-mps-control nvidia-cuda-mps-server)
#     the absolute paths nvliblist.conf names, regular files at their own
#       path (/usr/share/glvnd/egl_vendor.d/10_nvidia.json,
#       /usr/share/vulkan/icd.d/nvidia_{icd,layers}.json,
#       /usr/share/vulkan/implicit_layer.d/nvidia_layers.json,
#       /usr/share/egl/egl_external_platform.d/{15_nvidia_gbm,10_nvidia_wayland}.json,
#       /usr/share/nvidia/nvoptix.bin)
#     /.singularity.d/libs, a directory, and regular files lib*.so* in it
#       (addLibsMount: every library of nvliblist.conf found on the host)
#     /var/run/nvidia-persistenced/socket (NvidiaIpcsPath), a socket, also
#       seen as /run/nvidia-persistenced/socket: its RPC reaches the driver's
#       daemon, not Slurm
#     with --nvccli (nvidia-container-cli): NVIDIA/CUDA libraries (libcuda*,
#       libnvidia-*, libnvcuvid*, libnvoptix*, lib{GLX,EGL,GLESv1_CM,GLESv2,
#       vdpau}_nvidia*) as regular files directly in /usr/lib, /usr/lib32,
#       /usr/lib64 or /usr/lib/<arch>-linux-gnu, and firmware, regular files
#       in /lib/firmware/nvidia/<version>/ (or /usr/lib/firmware/…)
#   the stage's own binds: author /nemorl/author; train and eval
#     /nemorl/bundle, /nemorl/out and one regular file directly in /nemorl/in
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

# nvliblist.conf's binaries (bound at /usr/bin/<name>) and absolute paths.
nv_bins=" nvidia-smi nvidia-debugdump nvidia-persistenced nvidia-cuda-mps-control nvidia-cuda-mps-server "
nv_files=" /usr/share/glvnd/egl_vendor.d/10_nvidia.json /usr/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_layers.json /usr/share/vulkan/implicit_layer.d/nvidia_layers.json /usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json /usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json /usr/share/nvidia/nvoptix.bin "

dir_at() { [ -d "$r$1" ] && [ ! -L "$r$1" ]; }
char_at() { [ -c "$r$1" ] && [ ! -L "$r$1" ]; }
persistenced() {
  [ "$gpu" = 1 ] || return 1
  case $1 in /var/run/nvidia-persistenced/socket | /run/nvidia-persistenced/socket) return 0 ;; esac
  return 1
}

# allowed_mount MP: 0 when MP is in the allowlist (the header); otherwise
# 1, with why set to what is wrong and which setting can cause it.
site="a site bind (apptainer.conf \"bind path\", APPTAINER_BIND, a wrapper's --bind) or apptainer.conf \"mount hostfs = yes\""
allowed_mount() {
  local mp=$1 dir base
  why="not a path Apptainer, --nv or the $stage stage's binds mount; cause: $site"
  case $mp in
    *\\*) why="an escaped mount point name; cause: $site"; return 1 ;;
  esac
  if [ -S "$r$mp" ] && [ ! -L "$r$mp" ]; then
    persistenced "$mp" && return 0
    why="a unix socket mounted onto a file (munge's or slurmd's reaches Slurm); cause: $site"
    return 1
  fi
  case $mp in
    / | /tmp | /var/tmp) dir_at "$mp"; return ;;
    /etc/passwd | /etc/group | /etc/hosts | /etc/localtime | /etc/resolv.conf | /etc/hostname) regular "$mp"; return ;;
    /proc | /proc/* | /sys | /sys/*) return 0 ;;
    /dev | /dev/pts | /dev/shm | /dev/mqueue) dir_at "$mp"; return ;;
    /dev/tty | /dev/console | /dev/null | /dev/zero | /dev/full | /dev/random | /dev/urandom) char_at "$mp"; return ;;
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
  if [ "$gpu" != 1 ]; then
    case $mp in
      /dev/nvidia* | /.singularity.d/libs | /.singularity.d/libs/* | /usr/bin/nvidia-* | *nvidia*)
        why="a GPU path in the $stage container, which gets no GPU; cause: --nv, or apptainer.conf \"always use nv = yes\""
        ;;
    esac
    return 1
  fi
  dir=${mp%/*} base=${mp##*/}
  case $mp in
    /dev/nvidia-caps) dir_at "$mp"; return ;;
    /dev/nvidia-caps/* | /dev/nvidia*) char_at "$mp"; return ;;
    /.singularity.d/libs) dir_at "$mp"; return ;;
    /.singularity.d/libs/*/* ) return 1 ;;
    /.singularity.d/libs/lib*.so*) regular "$mp"; return ;;
    /lib/firmware/nvidia/*/* | /usr/lib/firmware/nvidia/*/*)
      case ${mp#*/firmware/nvidia/} in */*/*) return 1 ;; esac
      regular "$mp"
      return
      ;;
  esac
  case $nv_files in *" $mp "*) regular "$mp"; return ;; esac
  case $dir in
    /usr/bin)
      case $nv_bins in *" $base "*) regular "$mp"; return ;; esac
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
declare -A mounted=() # checked as mount points already: not reported twice
if [ -r "$proc/self/mountinfo" ]; then
  while read -r _ _ _ _ mp _; do
    mounted[$mp]=1
    allowed_mount "$mp" || refuse "mount point $mp is not allowed in the $stage container: $why"
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
    [ -z "${mounted[${s#"$r"}]:-}" ] || continue
    persistenced "${s#"$r"}" && continue
    n=$((n + 1))
    [ "$n" -le 10 ] && refuse "unix socket ${s#"$r"} (a way to a daemon: munge's reaches Slurm)"
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
