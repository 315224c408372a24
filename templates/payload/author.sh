#!/bin/bash
# nemorl-slurm built-in author payload; runs inside the author image.
#
# 1. copy the pristine pinned checkout (NeMo-RL/ with Gym inside it,
#    recipe.yaml, train_math.jsonl) to a private node-local work dir and
#    commit a git baseline;
# 2. open secrets.env on descriptor 3 and delete the file at once; start
#    the Anthropic-Messages endpoint for Claude Code (author_proxy.py, NeMo
#    Gym's adapter in front of the policy's OpenAI-compatible server), which
#    reads the key from that descriptor (--key-fd 3): the key is never in
#    this shell, an environment or a command line, and the proxy, the only
#    process that ever holds it, makes itself non-dumpable. Descriptor 4,
#    opened by the batch script on a file outside the container, goes to the
#    proxy alone (--status-fd 4: one line per upstream call, which the
#    script reads to tell an endpoint outage from a policy failure); Claude
#    Code inherits neither;
# 3. run Claude Code headless in the work dir, bounded by research_seconds
#    (timeout) and max_turns; its stream-json transcript goes to transcript.jsonl;
# 4. nemorl-slurm payload author-finish: response.json (a Responses-API
#    object), change.diff (git diff --cached --binary of recipe.yaml and
#    NeMo-RL/ only) and the NEMORL_ENV_AUTHOR_RESULT record on stdout.
#
# Inputs (NEMORL_*): OUT (this stage's directory), BUNDLE (author.json),
# PROMPT (the task instructions, budgets filled in), SECRETS.
# NEMORL_IMAGE_ROOT (default /opt/nemorl) is where the image keeps its files;
# tests point it at stand-ins.
set -euo pipefail
umask 077
: "${NEMORL_OUT:?}" "${NEMORL_BUNDLE:?}" "${NEMORL_PROMPT:?}" "${NEMORL_SECRETS:?}"
root=${NEMORL_IMAGE_ROOT:-/opt/nemorl}
bin=$root/bin/nemorl-slurm
log() { echo "nemorl author: $*" >&2; }

# The key first: open the file on descriptor 3 and delete it, whatever
# happens next. This shell never reads the key (its memory is readable by
# same-user processes); grep checks a fresh open of the descriptor.
if [ -f "$NEMORL_SECRETS" ]; then exec 3<"$NEMORL_SECRETS"; else exec 3</dev/null; fi
rm -f -- "$NEMORL_SECRETS"
if ! grep -q '^NEMORL_POLICY_API_KEY=.' /proc/self/fd/3; then
  log "$NEMORL_SECRETS held no NEMORL_POLICY_API_KEY"
  exit 78
fi
# Descriptor 4: the batch script's status file, for the proxy only (none when
# run without the script).
if ! { true >&4; } 2>/dev/null; then exec 4>/dev/null; fi

eval "$("$bin" payload settings "$NEMORL_BUNDLE/author.json")"
model=$NEMORL_SETTING_POLICY_MODEL_MODEL
research=$NEMORL_SETTING_RESEARCH_SECONDS
max_turns=$NEMORL_SETTING_MAX_TURNS

work=$(mktemp -d "${TMPDIR:-/tmp}/nemorl-author.XXXXXX")
proxy_pid=
cleanup() {
  if [ -n "$proxy_pid" ]; then kill "$proxy_pid" 2>/dev/null || true; fi
  rm -rf -- "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM # run cleanup on TERM too
cp -a -- "$root/src/NeMo-RL" "$root/src/recipe.yaml" "$root/src/train_math.jsonl" "$work/"
baseline=$("$bin" payload author-baseline --work "$work")
log "work dir $work, baseline $baseline"

port=$("$bin" payload free-port)
"$root/gym-venv/bin/python" "$NEMORL_BUNDLE/author_proxy.py" --settings "$NEMORL_BUNDLE/author.json" \
  --port "$port" --key-fd 3 --status-fd 4 > "$NEMORL_OUT/proxy.log" 2>&1 &
proxy_pid=$!
# Only the proxy keeps the key and status descriptors.
exec 3<&- 4>&-
"$bin" payload wait-http --url "http://127.0.0.1:$port/" --pid "$proxy_pid" --timeout 300s

mkdir -p "$work/.claude-config"
printf '%s\n' '{"env": {"CLAUDE_CODE_ATTRIBUTION_HEADER": "0", "CLAUDE_CODE_ENABLE_TELEMETRY": "0", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}}' \
  > "$work/.claude-config/settings.json"
status=0
(
  cd "$work"
  exec timeout --signal=TERM --kill-after=30 "$research" \
    env ANTHROPIC_BASE_URL="http://127.0.0.1:$port" ANTHROPIC_API_KEY=local ANTHROPIC_AUTH_TOKEN=local \
    ANTHROPIC_MODEL="$model" ANTHROPIC_DEFAULT_HAIKU_MODEL="$model" ANTHROPIC_DEFAULT_SONNET_MODEL="$model" \
    ANTHROPIC_DEFAULT_OPUS_MODEL="$model" CLAUDE_CODE_SUBAGENT_MODEL="$model" \
    CLAUDE_CODE_MAX_CONTEXT_TOKENS=262144 CLAUDE_CODE_MAX_OUTPUT_TOKENS=32768 DISABLE_COMPACT=1 \
    DISABLE_AUTOUPDATER=1 IS_SANDBOX=1 CLAUDE_CONFIG_DIR="$work/.claude-config" \
    "$root/bin/claude" -p --output-format stream-json --verbose --dangerously-skip-permissions --bare \
    --model "$model" --append-system-prompt "$(cat -- "$NEMORL_PROMPT")" --max-turns "$max_turns" \
    -- "Improve post-training in NeMo RL and Gym."
) > "$NEMORL_OUT/transcript.jsonl" 2> "$NEMORL_OUT/claude.log" || status=$?
timed_out=false
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then timed_out=true; fi
log "claude exited with status $status (timed out: $timed_out)"
kill "$proxy_pid" 2>/dev/null || true
wait "$proxy_pid" 2>/dev/null || true
proxy_pid=

"$bin" payload author-finish --work "$work" --baseline "$baseline" --transcript "$NEMORL_OUT/transcript.jsonl" \
  --out "$NEMORL_OUT" --exit-status "$status" --timed-out="$timed_out" --model "$model"
