# shellcheck shell=bash
# Sourced: the scripts that source it use the variables it sets.
# shellcheck disable=SC2034
# Shared definitions for lab/up, lab/down, lab/status, lab/sshd, lab/daemon
# and lab/cluster3.
# Sourced, never executed. Callers run with `set -euo pipefail`.

LAB_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STATE="${NEMORL_LAB_DIR:-/var/lib/nemorl-lab}"

LAB_CLUSTER=nemorl-lab
LAB_ACCOUNT=lab
LAB_PARTITION=gpu
LAB_USER=nemorl
LAB_HOME=/home/nemorl
LAB_WORKDIR=/home/nemorl/episodes
LAB_SSH_HOST=127.0.0.1
LAB_SSH_PORT=2222
LAB_STANDINS=/opt/nemorl-lab/stand-ins
LAB_GPU_TYPE=h100
# Four fake GPUs (and cluster 2 half as many): make test runs many lab
# tests at once, and the stand-in jobs wait more than they compute.
LAB_GPU_COUNT=4
LAB_GPU_DEV=/dev/nemorl-fakegpu
LAB_DB=slurm_acct_db
LAB_DB_USER=slurm

# The real author stage (configs/lab-real-author.yaml): the built-in author
# payload runs on the host (runtime none) with its image root at
# LAB_IMAGE_ROOT, as in the author image, but with lab stand-ins for the
# sources and for the policy model (lab/policy-standin).
LAB_IMAGE_ROOT=/opt/nemorl
LAB_CLAUDE_VERSION=2.1.332
LAB_CLAUDE_PREFIX=/opt/nemorl-lab/claude-code
LAB_BIN=/opt/nemorl-lab/bin
LAB_SOURCE_STAMP="$LAB_BIN/.source-sha256"

SLURM_ETC=/etc/slurm
SLURM_USER=slurm

# Cluster 1's Prolog (lab/up writes it): it fails the launch of the one
# job whose id lab/daemon launch-fail wrote to LAB_FAIL_LAUNCH, once.
LAB_PROLOG="$STATE/prolog"
LAB_FAIL_LAUNCH="$STATE/fail-launch"

LOGDIR="$STATE/log"
RUNDIR="$STATE/run"
SSHDIR="$STATE/ssh"
KEYDIR="$STATE/keys"
SPOOL="$STATE/slurm"

SSHD_CONFIG="$SSHDIR/sshd_config"
SSHD_HOST_KEY="$SSHDIR/ssh_host_ed25519_key"
SSHD_PID="$RUNDIR/sshd.pid"
SSHD_LOG="$LOGDIR/sshd.log"
CLIENT_KEY="$KEYDIR/nemorl_ed25519"
KNOWN_HOSTS="$STATE/known_hosts"
LAB_ENV="$STATE/lab.env"

# Cluster 3 (lab/cluster3): what lab/up, lab/down and lab/status need of it
# (the rest is lab/cluster3's own).
LAB3_SSH_PORT=2225
SSHD3_HOST_KEY="$SSHDIR/ssh_host_ed25519_key-lab3"
LAB3_ENV="$STATE/lab3.env"
# Its build's dependencies, from this machine's release (lab/up --cluster3
# installs them with its own packages: no apt-get runs beside the builds).
LAB3_BUILD_DEPS=(build-essential pkg-config python3 libmunge-dev libmariadb-dev libmariadb-dev-compat)

MUNGE_PID=/run/munge/munged.pid
MUNGE_LOG="$LOGDIR/munged.log"
MARIADB_PID=/run/mysqld/mysqld.pid
MARIADB_SOCK=/run/mysqld/mysqld.sock
MARIADB_LOG="$LOGDIR/mariadb.log"
SLURMDBD_PID="$RUNDIR/slurmdbd.pid"
SLURMCTLD_PID="$RUNDIR/slurmctld.pid"
SLURMD_PID="$RUNDIR/slurmd.pid"

export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH"
# Slurm commands here reach cluster 1 (/etc/slurm/slurm.conf); those for
# cluster 2 name its config themselves (lab2), whatever the caller has.
unset SLURM_CONF

log()  { printf '[lab] %s\n' "$*" >&2; }
die()  { printf '[lab] ERROR: %s\n' "$*" >&2; exit 1; }

need_root() {
    [ "$(id -u)" -eq 0 ] || die "must run as root"
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }

# show_log FILE [N]: print the tail of a log file to stderr.
show_log() {
    local f="$1" n="${2:-40}"
    if [ -s "$f" ]; then
        printf '[lab] ---- last %s lines of %s ----\n' "$n" "$f" >&2
        tail -n "$n" "$f" >&2 || true
        printf '[lab] ---- end of %s ----\n' "$f" >&2
    else
        printf '[lab] (log %s is empty or missing)\n' "$f" >&2
    fi
}

# pid_from FILE: the pid in FILE if that process is alive, else nothing.
pid_from() {
    local f="$1" pid
    [ -r "$f" ] || return 1
    pid="$(tr -dc '0-9' <"$f" 2>/dev/null || true)"
    [ -n "$pid" ] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    printf '%s\n' "$pid"
}

# alive PIDFILE COMM: true if the pid file names a live process whose
# command name starts with COMM (guards against recycled pids).
alive() {
    local pid comm
    pid="$(pid_from "$1")" || return 1
    comm="$(cat "/proc/$pid/comm" 2>/dev/null || true)"
    case "$comm" in "$2"*) return 0 ;; esac
    return 1
}

# descendants PID: every descendant pid of PID (children first listed last).
descendants() {
    ps -e -o pid=,ppid= 2>/dev/null | awk -v root="$1" '
        { parent[$1] = $2; pids[NR] = $1 }
        END {
            for (i = 1; i <= NR; i++) {
                p = pids[i]; q = parent[p]; n = 0
                while (q != "" && q != 0 && q != 1 && n++ < 64) {
                    if (q == root) { print p; break }
                    q = parent[q]
                }
            }
        }'
}

# stop_pid NAME PIDFILE COMM [TIMEOUT]: SIGTERM, wait, then SIGKILL.
stop_pid() {
    local name="$1" pidfile="$2" comm="$3" timeout="${4:-20}" pid i
    if ! alive "$pidfile" "$comm"; then
        log "$name: not running"
        rm -f "$pidfile"
        return 0
    fi
    pid="$(pid_from "$pidfile")"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < timeout * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "$name: still alive after ${timeout}s, sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.2
    fi
    rm -f "$pidfile"
    log "$name: stopped (pid $pid)"
}

# wait_for SECONDS DESCRIPTION CMD...: retry CMD every 0.25s until it succeeds.
wait_for() {
    local timeout="$1" what="$2" deadline
    shift 2
    deadline=$(($(date +%s) + timeout))
    while ! "$@" >/dev/null 2>&1; do
        if [ "$(date +%s)" -ge "$deadline" ]; then
            log "timed out after ${timeout}s waiting for: $what"
            return 1
        fi
        sleep 0.25
    done
}

# write_file PATH MODE OWNER: write stdin to PATH only when the content
# differs; returns 0 when the file changed, 1 when it was already current.
write_file() {
    local path="$1" mode="$2" owner="$3" tmp
    tmp="$(mktemp "${path}.XXXXXX")"
    cat >"$tmp"
    if [ -f "$path" ] && cmp -s "$tmp" "$path"; then
        rm -f "$tmp"
        chmod "$mode" "$path"
        chown "$owner" "$path"
        return 1
    fi
    chmod "$mode" "$tmp"
    chown "$owner" "$tmp"
    mv -f "$tmp" "$path"
    return 0
}

# ---- MariaDB (system datadir /var/lib/mysql, default socket) ---------------

mariadb_ok() { mariadb-admin --socket="$MARIADB_SOCK" ping; }

mariadb_start() {
    mkdir -p "$LOGDIR"
    install -d -m 0755 -o mysql -g mysql /run/mysqld
    touch "$MARIADB_LOG"
    chown mysql:mysql "$MARIADB_LOG"
    if alive "$MARIADB_PID" mariadbd && mariadb_ok >/dev/null 2>&1; then
        log "mariadb: already running"
        return 0
    elif mariadb_ok >/dev/null 2>&1; then
        log "mariadb: already running (not started by the lab)"
        return 0
    fi
    if alive "$MARIADB_PID" mariadbd; then stop_pid mariadb "$MARIADB_PID" mariadbd 60; fi
    if [ ! -d /var/lib/mysql/mysql ]; then
        log "mariadb: initialising /var/lib/mysql"
        install -d -m 0755 -o mysql -g mysql /var/lib/mysql
        mariadb-install-db --user=mysql --datadir=/var/lib/mysql \
            --auth-root-authentication-method=socket >>"$MARIADB_LOG" 2>&1 ||
            { show_log "$MARIADB_LOG"; die "mariadb-install-db failed"; }
    fi
    setsid /usr/sbin/mariadbd --user=mysql --pid-file="$MARIADB_PID" --socket="$MARIADB_SOCK" \
        --log-error="$MARIADB_LOG" </dev/null >>"$MARIADB_LOG" 2>&1 &
    wait_for 60 "mariadb ping" mariadb_ok || { show_log "$MARIADB_LOG"; die "mariadb did not start"; }
    log "mariadb: started"
}

mariadb_stop() {
    local pid i
    if alive "$MARIADB_PID" mariadbd; then
        pid="$(pid_from "$MARIADB_PID")"
        mariadb-admin --socket="$MARIADB_SOCK" shutdown >/dev/null 2>&1 || true
        for ((i = 0; i < 300; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    fi
    if alive "$MARIADB_PID" mariadbd; then
        stop_pid mariadb "$MARIADB_PID" mariadbd 30
    elif [ -n "${pid:-}" ]; then
        log "mariadb: stopped (pid $pid)"
    else
        log "mariadb: not running"
    fi
}

# ---- Slurm daemons and the node (lab/up, lab/daemon) ----------------------

# lab_node: the lab's one node, named after the short hostname.
lab_node() { hostname -s; }

# dbd_ok: slurmdbd answers sacctmgr.
dbd_ok() { sacctmgr -n -P show cluster format=cluster; }
# ctld_ok: slurmctld answers a ping.
ctld_ok() { scontrol ping | grep -q 'is UP'; }
# node_state: the node's state as sinfo has it (idle, mixed, down*, drained, ...).
node_state() { sinfo -h -N -n "$(lab_node)" -o '%T' 2>/dev/null | head -n1; }
# node_ready: the node is in service (a "*" suffix, not responding, is
# not). "planned": the backfill scheduler has planned a pending job on it
# (seen with make test's parallel tests queueing).
node_ready() { case "$(node_state)" in idle | mixed | allocated | completing | planned | *-planned) return 0 ;; esac; return 1; }

# node_resume: put a node left DOWN, DRAINED or FAILED (by a crashed
# slurmd, or lab/daemon node-down) back in service: State=RESUME, retried
# while slurmd registers (up to ~10 s). Does not wait for node_ready.
node_resume() {
    local _
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        case "$(node_state)" in
        down* | drain* | fail*) scontrol update NodeName="$(lab_node)" State=RESUME >/dev/null 2>&1 || true; sleep 1 ;;
        *) break ;;
        esac
    done
}

# ---- lab sshd -------------------------------------------------------------
# Two lab sshds: cluster 1's (127.0.0.1:2222, SSHD_*) and cluster 2's
# (127.0.0.1:2224, SSHD2_*, further down). The sshd_* functions are
# cluster 1's; both are made by the _sshd_* ones.

sshd_running() { alive "$SSHD_PID" sshd; }

# _sshd_host_key KEY COMMENT: make the ed25519 host key KEY (and KEY.pub)
# when it is missing; an existing one is kept.
_sshd_host_key() {
    local key="$1" comment="$2"
    mkdir -p "$SSHDIR" "$RUNDIR" "$LOGDIR"
    chmod 0700 "$SSHDIR"
    if [ ! -s "$key" ]; then
        rm -f "$key" "$key.pub"
        ssh-keygen -q -t ed25519 -N '' -C "$comment" -f "$key"
        log "sshd: generated host key $key"
    fi
    [ -s "$key.pub" ] || ssh-keygen -y -f "$key" >"$key.pub"
    chmod 0600 "$key"
    chmod 0644 "$key.pub"
}

# _sshd_config_text PORT HOST_KEY PID_FILE [LINE...]: a lab sshd's config
# on stdout; the LINEs go at its end.
_sshd_config_text() {
    local port="$1" key="$2" pidfile="$3"
    shift 3
    cat <<EOF
# nemorl lab sshd (generated by lab/up; edits are overwritten)
Port $port
ListenAddress $LAB_SSH_HOST
HostKey $key
PidFile $pidfile
AuthorizedKeysFile .ssh/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
AllowUsers $LAB_USER
# No PAM: Debian's sshd PAM stack requires pam_loginuid, which fails in
# many containers. The lab user's password field is '*' (not locked).
UsePAM no
X11Forwarding no
PrintMotd no
LogLevel INFO
Subsystem sftp /usr/lib/openssh/sftp-server
EOF
    [ $# -eq 0 ] || printf '%s\n' "$@"
}

sshd_write_config() {
    _sshd_host_key "$SSHD_HOST_KEY" nemorl-lab-host
    # Own config: listens on 127.0.0.1:2222 only; the system sshd is untouched.
    # MaxSessions/MaxStartups are left at their defaults on purpose.
    SSHD_CONF_CHANGED=0
    _sshd_config_text "$LAB_SSH_PORT" "$SSHD_HOST_KEY" "$SSHD_PID" |
        write_file "$SSHD_CONFIG" 0600 root:root && SSHD_CONF_CHANGED=1
    return 0
}

# _sshd_start NAME CONFIG LOG PIDFILE PORT [LAUNCHER...]: start a lab sshd
# (LAUNCHER, if any, runs it: in_lab2_node) unless it is running.
_sshd_start() {
    local name="$1" config="$2" logf="$3" pidfile="$4" port="$5"
    shift 5
    if alive "$pidfile" sshd; then
        log "$name: already running (pid $(pid_from "$pidfile"))"
        return 0
    fi
    mkdir -p /run/sshd
    chmod 0755 /run/sshd
    if ! /usr/sbin/sshd -t -f "$config" 2>>"$logf"; then
        show_log "$logf"
        die "$name: config test failed"
    fi
    # shellcheck disable=SC2094 # sshd -E and the redirection both only append to the log
    "$@" /usr/sbin/sshd -f "$config" -E "$logf" </dev/null >>"$logf" 2>&1 || {
        show_log "$logf"
        die "$name: failed to start"
    }
    if ! wait_for 10 "lab $name listening" alive "$pidfile" sshd; then
        show_log "$logf"
        die "$name: did not come up"
    fi
    log "$name: started on $LAB_SSH_HOST:$port (pid $(pid_from "$pidfile"))"
}

sshd_start() {
    if sshd_running; then
        log "sshd: already running (pid $(pid_from "$SSHD_PID"))"
        return 0
    fi
    sshd_write_config
    _sshd_start sshd "$SSHD_CONFIG" "$SSHD_LOG" "$SSHD_PID" "$LAB_SSH_PORT"
}

# _sshd_stop NAME PIDFILE: stop a lab sshd listener AND every connection it
# is serving (like a host going away), so clients really have to reconnect.
_sshd_stop() {
    local name="$1" pidfile="$2" pid kids
    if ! alive "$pidfile" sshd; then
        log "$name: not running"
        rm -f "$pidfile"
        return 0
    fi
    pid="$(pid_from "$pidfile")"
    kids="$(descendants "$pid" | tr '\n' ' ')"
    stop_pid "$name" "$pidfile" sshd 10
    if [ -n "${kids// /}" ]; then
        # shellcheck disable=SC2086
        kill -TERM $kids 2>/dev/null || true
        sleep 0.3
        # shellcheck disable=SC2086
        kill -KILL $kids 2>/dev/null || true
        log "$name: closed sessions of the lab $name: $kids"
    fi
}

# sshd_stop: stop cluster 1's lab sshd and its sessions (_sshd_stop).
sshd_stop() { _sshd_stop sshd "$SSHD_PID"; }

# ssh_probe: one real login as the lab user with strict host key checking.
ssh_probe() {
    ssh -n -i "$CLIENT_KEY" -p "$LAB_SSH_PORT" \
        -o BatchMode=yes -o IdentitiesOnly=yes \
        -o StrictHostKeyChecking=yes -o UserKnownHostsFile="$KNOWN_HOSTS" \
        -o GlobalKnownHostsFile=/dev/null -o ConnectTimeout=5 \
        "$LAB_USER@$LAB_SSH_HOST" true
}

# ---- cluster 2 (lab/up, lab/cluster2, lab/down, lab/status) ---------------
# A second Slurm cluster on this host: its own slurmctld, and a second
# slurmd for the same node name (this machine's hostname) with its own
# config, ports, spool and pid files; the same munge and slurmdbd. Its
# slurmd and its sshd run in a mount namespace of their own in which
# /etc/slurm is cluster 2's config directory, as on a node and a login node
# of cluster 2: jobs there, and sessions on its sshd, reach cluster 2 even
# without SLURM_CONF (the sshd's sessions also have SLURM_CONF set, SetEnv).
LAB2_CLUSTER=nemorl-lab2
LAB2_ETC=/etc/slurm-lab2
LAB2_CONF="$LAB2_ETC/slurm.conf"
LAB2_CTLD_PORT=6827
LAB2_SLURMD_PORT=6828
LAB2_SSH_PORT=2224
LAB2_GPU_COUNT=2
LAB2_GPU_DEV=/dev/nemorl-lab2-fakegpu
# Job ids from here on: no id of cluster 2 is one of cluster 1's (those
# start at 1), so a job looked up on the wrong cluster is not found there.
LAB2_FIRST_JOB_ID=10000000
LAB2_SPOOL="$SPOOL/lab2"
SLURMCTLD2_PID="$RUNDIR/slurmctld-lab2.pid"
SLURMD2_PID="$RUNDIR/slurmd-lab2.pid"
SLURMCTLD2_LOG="$LOGDIR/slurmctld-lab2.log"
SLURMD2_LOG="$LOGDIR/slurmd-lab2.log"
SSHD2_CONFIG="$SSHDIR/sshd_config-lab2"
SSHD2_HOST_KEY="$SSHDIR/ssh_host_ed25519_key-lab2"
SSHD2_PID="$RUNDIR/sshd-lab2.pid"
SSHD2_LOG="$LOGDIR/sshd-lab2.log"

# lab2 CMD...: run CMD (a command or one of these functions: ctld_ok,
# node_ready, node_resume, ...) against cluster 2.
lab2() { SLURM_CONF="$LAB2_CONF" "$@"; }

# in_lab2_node CMD...: exec CMD in a new mount namespace (mounts of the host
# still propagate into it) where $LAB2_ETC is bind-mounted on /etc/slurm and
# $LAB2_TMP on /tmp: a node of another cluster has a /tmp of its own (the
# job scripts sweep their user's stale scratch directories in /tmp by the
# job ids their own cluster's squeue lists; on a shared /tmp, cluster 1's
# jobs would sweep cluster 2's).
LAB2_TMP="$LAB2_SPOOL/tmp"
in_lab2_node() {
    mkdir -p "$LAB2_TMP" && chmod 1777 "$LAB2_TMP" || return 1
    # shellcheck disable=SC2016 # the inner shell expands them
    unshare --mount --propagation slave -- /bin/sh -c \
        'mount --bind "$1" /etc/slurm && mount --bind "$2" /tmp || exit 1; shift 2; exec "$@"' in_lab2_node "$LAB2_ETC" "$LAB2_TMP" "$@"
}

# run_closed CMD...: run CMD with only stdin, stdout and stderr open. A
# daemon must not inherit its caller's other descriptors: slurmdbd keeps
# them for good, and a lab lock among them (flock(1) without -o around
# lab/daemon) would then be held as long as slurmdbd runs. CMD may be a
# function of these scripts (in_lab2_node).
run_closed() {
    (
        for fd in /proc/self/fd/*; do
            fd="${fd##*/}"
            if [ "$fd" -gt 2 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi
        done
        if declare -F "$1" >/dev/null; then
            "$@"
            exit
        fi
        exec "$@"
    )
}

# lab2_registered: slurmdbd knows where cluster 2's slurmctld listens (what
# sacct -M, squeue -M and sbatch -M need).
lab2_registered() {
    [ "$(sacctmgr -n -P show cluster "$LAB2_CLUSTER" format=controlport 2>/dev/null)" = "$LAB2_CTLD_PORT" ]
}

# ctld2_start: start cluster 2's slurmctld unless it runs, and wait until it
# answers; then, if its slurmd runs, until the node is in service (it is
# UNKNOWN until slurmd registers again), and, if slurmdbd answers, until
# slurmdbd has its address again.
ctld2_start() {
    local what=started
    if alive "$SLURMCTLD2_PID" slurmctld; then
        what="already running"
    else
        rm -f "$SLURMCTLD2_PID"
        run_closed /usr/sbin/slurmctld -f "$LAB2_CONF" </dev/null >>"$SLURMCTLD2_LOG" 2>&1 ||
            { show_log "$SLURMCTLD2_LOG"; die "cluster 2 slurmctld failed to start"; }
    fi
    wait_for 60 "cluster 2 slurmctld ping" lab2 ctld_ok ||
        { show_log "$SLURMCTLD2_LOG"; die "cluster 2 slurmctld not answering"; }
    if alive "$SLURMD2_PID" slurmd; then node2_wait; fi
    if dbd_ok >/dev/null 2>&1; then
        wait_for 30 "cluster 2 registered with slurmdbd" lab2_registered ||
            { show_log "$SLURMCTLD2_LOG"; die "cluster 2 slurmctld did not register with slurmdbd"; }
    fi
    log "slurmctld-lab2: $what (pid $(pid_from "$SLURMCTLD2_PID" || echo '?')), answering"
}

# ctld2_stop: graceful: SIGTERM, SIGKILL after 30 s. Its slurmd, its sshd
# and the jobs running go on.
ctld2_stop() { stop_pid slurmctld-lab2 "$SLURMCTLD2_PID" slurmctld 30; }

# slurmd2_start: start cluster 2's slurmd (in its node's namespace) unless
# it runs.
slurmd2_start() {
    if alive "$SLURMD2_PID" slurmd; then
        log "slurmd-lab2: already running (pid $(pid_from "$SLURMD2_PID"))"
        return 0
    fi
    rm -f "$SLURMD2_PID"
    run_closed in_lab2_node /usr/sbin/slurmd -f "$LAB2_CONF" </dev/null >>"$SLURMD2_LOG" 2>&1 ||
        { show_log "$SLURMD2_LOG"; die "cluster 2 slurmd failed to start"; }
    log "slurmd-lab2: started"
}

# node2_wait: wait until cluster 2's node is in service, RESUMEing it if it
# was left DOWN/DRAINED.
node2_wait() {
    lab2 node_resume
    wait_for 60 "node $(lab_node) of cluster 2 in service" lab2 node_ready || {
        lab2 sinfo -N -o '%N %T %E' >&2 || true
        show_log "$SLURMD2_LOG"
        show_log "$SLURMCTLD2_LOG"
        die "node $(lab_node) of cluster 2 did not come into service"
    }
}

sshd2_write_config() {
    _sshd_host_key "$SSHD2_HOST_KEY" nemorl-lab2-host
    # As cluster 1's, on its own port, with its own host key (another
    # login node), and SLURM_CONF naming cluster 2's config.
    SSHD2_CONF_CHANGED=0
    _sshd_config_text "$LAB2_SSH_PORT" "$SSHD2_HOST_KEY" "$SSHD2_PID" \
        "# Cluster 2 (nemorl lab): Slurm clients in its sessions talk to $LAB2_CLUSTER." \
        "SetEnv SLURM_CONF=$LAB2_CONF" |
        write_file "$SSHD2_CONFIG" 0600 root:root && SSHD2_CONF_CHANGED=1
    return 0
}

sshd2_start() {
    alive "$SSHD2_PID" sshd || sshd2_write_config
    _sshd_start sshd-lab2 "$SSHD2_CONFIG" "$SSHD2_LOG" "$SSHD2_PID" "$LAB2_SSH_PORT" run_closed in_lab2_node
}

sshd2_stop() { _sshd_stop sshd-lab2 "$SSHD2_PID"; }

# ssh2_probe: ssh_probe on cluster 2's sshd.
ssh2_probe() { LAB_SSH_PORT="$LAB2_SSH_PORT" ssh_probe; }

# ---- the real author stage --------------------------------------------------

# lab_go: the go command (CI has it in /usr/local/go/bin, not on root's PATH).
lab_go() {
    if command -v go >/dev/null 2>&1; then
        command go "$@"
    elif [ -x /usr/local/go/bin/go ]; then
        /usr/local/go/bin/go "$@"
    else
        die "go not found (PATH, /usr/local/go/bin): needed to build nemorl-slurm for the lab's author stage"
    fi
}

# lab_source_hash: one sha256 over every non-standard Go source and embedded
# file nemorl-slurm and lab/policy-standin are built from (go list -deps),
# go.mod, go.sum and the go version. lab/up rebuilds both when it changes;
# cli/author_lab_test.go runs this same function to tell a stale install.
lab_source_hash() {
    local repo sums
    repo="$(dirname "$LAB_SRC")"
    sums="$(
        set -eo pipefail
        cd "$repo"
        lab_go version
        {
            # shellcheck disable=SC2016
            lab_go list -deps -f '{{if not .Standard}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}
{{end}}{{range .CgoFiles}}{{$d}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}
{{end}}{{end}}' ./cmd/nemorl-slurm ./lab/policy-standin
            printf '%s\n' "$repo/go.mod" "$repo/go.sum"
        } | LC_ALL=C sort -u | tr '\n' '\0' | xargs -0 sha256sum
    )" || return 1
    printf '%s\n' "$sums" | sha256sum | cut -d' ' -f1
}
