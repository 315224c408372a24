# shellcheck shell=bash
# Sourced: the scripts that source it use the variables it sets.
# shellcheck disable=SC2034
# Shared definitions for lab/up, lab/down, lab/status, lab/sshd and lab/daemon.
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
LAB_GPU_COUNT=2
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

MUNGE_PID=/run/munge/munged.pid
MUNGE_LOG="$LOGDIR/munged.log"
MARIADB_PID=/run/mysqld/mysqld.pid
MARIADB_SOCK=/run/mysqld/mysqld.sock
MARIADB_LOG="$LOGDIR/mariadb.log"
SLURMDBD_PID="$RUNDIR/slurmdbd.pid"
SLURMCTLD_PID="$RUNDIR/slurmctld.pid"
SLURMD_PID="$RUNDIR/slurmd.pid"

export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH"

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
# node_ready: the node is in service (a "*" suffix, not responding, is not).
node_ready() { case "$(node_state)" in idle | mixed | allocated | completing) return 0 ;; esac; return 1; }

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

sshd_running() { alive "$SSHD_PID" sshd; }

sshd_write_config() {
    mkdir -p "$SSHDIR" "$RUNDIR" "$LOGDIR"
    chmod 0700 "$SSHDIR"
    if [ ! -s "$SSHD_HOST_KEY" ]; then
        rm -f "$SSHD_HOST_KEY" "$SSHD_HOST_KEY.pub"
        ssh-keygen -q -t ed25519 -N '' -C "nemorl-lab-host" -f "$SSHD_HOST_KEY"
        log "sshd: generated host key $SSHD_HOST_KEY"
    fi
    [ -s "$SSHD_HOST_KEY.pub" ] || ssh-keygen -y -f "$SSHD_HOST_KEY" >"$SSHD_HOST_KEY.pub"
    chmod 0600 "$SSHD_HOST_KEY"
    chmod 0644 "$SSHD_HOST_KEY.pub"
    # Own config: listens on 127.0.0.1:2222 only; the system sshd is untouched.
    # MaxSessions/MaxStartups are left at their defaults on purpose.
    SSHD_CONF_CHANGED=0
    write_file "$SSHD_CONFIG" 0600 root:root <<EOF && SSHD_CONF_CHANGED=1
# nemorl lab sshd (generated by lab/up; edits are overwritten)
Port $LAB_SSH_PORT
ListenAddress $LAB_SSH_HOST
HostKey $SSHD_HOST_KEY
PidFile $SSHD_PID
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
    return 0
}

sshd_start() {
    if sshd_running; then
        log "sshd: already running (pid $(pid_from "$SSHD_PID"))"
        return 0
    fi
    sshd_write_config
    mkdir -p /run/sshd
    chmod 0755 /run/sshd
    if ! /usr/sbin/sshd -t -f "$SSHD_CONFIG" 2>>"$SSHD_LOG"; then
        show_log "$SSHD_LOG"
        die "sshd: config test failed"
    fi
    # shellcheck disable=SC2094 # sshd -E and the redirection both only append to the log
    /usr/sbin/sshd -f "$SSHD_CONFIG" -E "$SSHD_LOG" </dev/null >>"$SSHD_LOG" 2>&1 || {
        show_log "$SSHD_LOG"
        die "sshd: failed to start"
    }
    if ! wait_for 10 "lab sshd listening" sshd_running; then
        show_log "$SSHD_LOG"
        die "sshd: did not come up"
    fi
    log "sshd: started on $LAB_SSH_HOST:$LAB_SSH_PORT (pid $(pid_from "$SSHD_PID"))"
}

# sshd_stop: stop the lab sshd listener AND every connection it is serving
# (like a host going away), so clients really have to reconnect.
sshd_stop() {
    local pid kids
    if ! sshd_running; then
        log "sshd: not running"
        rm -f "$SSHD_PID"
        return 0
    fi
    pid="$(pid_from "$SSHD_PID")"
    kids="$(descendants "$pid" | tr '\n' ' ')"
    stop_pid sshd "$SSHD_PID" sshd 10
    if [ -n "${kids// /}" ]; then
        # shellcheck disable=SC2086
        kill -TERM $kids 2>/dev/null || true
        sleep 0.3
        # shellcheck disable=SC2086
        kill -KILL $kids 2>/dev/null || true
        log "sshd: closed sessions of the lab sshd: $kids"
    fi
}

# ssh_probe: one real login as the lab user with strict host key checking.
ssh_probe() {
    ssh -n -i "$CLIENT_KEY" -p "$LAB_SSH_PORT" \
        -o BatchMode=yes -o IdentitiesOnly=yes \
        -o StrictHostKeyChecking=yes -o UserKnownHostsFile="$KNOWN_HOSTS" \
        -o GlobalKnownHostsFile=/dev/null -o ConnectTimeout=5 \
        "$LAB_USER@$LAB_SSH_HOST" true
}

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
