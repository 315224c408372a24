#!/bin/bash
# nemorl-slurm built-in eval payload; runs inside the pinned, unpatched eval
# image, after the eval script checked the image and this bundle.
#
# 1. copy the weights to a private node-local work dir; what is checked,
#    served and scored is that copy;
# 2. nemorl-slurm evaluate check-weights: safetensors header, float dtypes,
#    finite values, the exact Qwen2.5-1.5B-Instruct names and shapes; its
#    sha256. Rejected (its exit 4): this payload exits 68, the policy's
#    weights were bad (templates.ExitWeightsRejected);
# 3. nemorl-slurm evaluate contamination: the author's patch (read as data,
#    never applied) against the image's AIME25 problems: their statements,
#    their answers as a list, or parts of statements with their answers in
#    its added lines, what its binary sections decode to (a delta's base read
#    from the image's pristine tree, $root/src), and the eval set named.
#    Found, or a binary section that cannot be decoded (its exit 4): the
#    weights are not scored, and
#    evaluate score prints the record of reward 0 with the evidence; exit 0.
#    The report is kept as contamination.json in the work directory;
# 4. serve the weights (with the image's config and tokenizer at the pinned
#    revision) with vLLM: --max-model-len 32768 --gpu-memory-utilization 0.85
#    --enforce-eager, ready within server_ready_seconds;
# 5. eval_prepare.py: the 30 AIME25 questions as NeMo Gym rows with the boxed
#    prompt and max_output_tokens = 32768 minus the prompt's tokens, and the
#    Gym config naming them; gym eval run: 8 repeats, temperature 0.7, top-p
#    1, the configured concurrency;
# 6. nemorl-slurm evaluate score: exactly 30 questions × 8 answers, rewards
#    0 or 1, no failed rollouts → the NEMORL_ENV_RESULT record, bound to this
#    job's id, the weights' sha256 and the patch and problems checked. Rejected: exit 4, the rollouts were
#    bad (eval infrastructure), never the policy's doing.
# Any other failure exits with its own status. The eval script passes this
# payload's status through (it is trusted: the pinned image).
#
# Inputs (NEMORL_*): WEIGHTS (read-only), PATCH (the author's change.diff, a
# node-local copy, read-only), BUNDLE (eval.json, eval_prepare.py),
# OUT (a work directory kept for inspection); SLURM_JOB_ID.
# NEMORL_IMAGE_ROOT (default /opt/nemorl) is where the image keeps its files;
# tests point it at stand-ins.
set -euo pipefail
umask 077
: "${NEMORL_WEIGHTS:?}" "${NEMORL_PATCH:?}" "${NEMORL_BUNDLE:?}" "${NEMORL_OUT:?}" "${SLURM_JOB_ID:?}"
root=${NEMORL_IMAGE_ROOT:-/opt/nemorl}
bin=$root/bin/nemorl-slurm
venv=$root/src/NeMo-RL/.venv
gym=$root/src/NeMo-RL/3rdparty/Gym-workspace/Gym
log() { echo "nemorl eval: $*" >&2; }

eval "$("$bin" payload settings "$NEMORL_BUNDLE/eval.json")"
concurrency=$NEMORL_SETTING_CONCURRENCY

work=$(mktemp -d "${TMPDIR:-/tmp}/nemorl-eval-work.XXXXXX")
server_pid=
stop_server() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
  fi
}
trap 'stop_server; rm -rf -- "$work"' EXIT

mkdir -p "$work/model"
for f in "$root/model"/*; do
  case $f in *.safetensors | *.bin) ;; *) cp -- "$f" "$work/model/" ;; esac
done
cp -- "$NEMORL_WEIGHTS" "$work/model/model.safetensors"
check=0
sha=$("$bin" evaluate check-weights --arch "$NEMORL_SETTING_ARCHITECTURE" "$work/model/model.safetensors") || check=$?
if [ "$check" = 4 ]; then
  log "weights rejected by check-weights: the policy's weights are bad (exit 68)"
  exit 68
elif [ "$check" != 0 ]; then
  log "check-weights failed with status $check"
  exit "$check"
fi
sha=${sha%% *}
log "weights accepted: sha256 $sha"

problems=$root/eval/aime25.jsonl
report=$work/contamination.json
contaminated=0
"$bin" evaluate contamination --patch "$NEMORL_PATCH" --problems "$problems" --pristine "$root/src" --report "$report" || contaminated=$?
cp -- "$report" "$NEMORL_OUT/contamination.json" 2>/dev/null || true
if [ "$contaminated" = 4 ]; then
  log "the patch holds the eval problems (contamination.json): the weights are not scored, the reward is 0"
  "$bin" evaluate score --contamination "$report" --questions "$problems" --weights-sha256 "$sha" --job-id "$SLURM_JOB_ID"
  exit 0
elif [ "$contaminated" != 0 ]; then
  log "the contamination check failed with status $contaminated"
  exit "$contaminated"
fi

port=$("$bin" payload free-port)
"$venv/bin/python" -m vllm.entrypoints.openai.api_server --model "$work/model" --host 127.0.0.1 --port "$port" \
  --max-model-len "$NEMORL_SETTING_MAX_MODEL_LEN" --max-num-seqs "$concurrency" \
  --gpu-memory-utilization "$NEMORL_SETTING_GPU_MEMORY_UTILIZATION" --enforce-eager \
  > "$NEMORL_OUT/vllm.log" 2>&1 &
server_pid=$!
"$bin" payload wait-http --url "http://127.0.0.1:$port/health" --want-status 200 --pid "$server_pid" \
  --timeout "${NEMORL_SETTING_SERVER_READY_SECONDS}s"

"$venv/bin/python" "$NEMORL_BUNDLE/eval_prepare.py" --questions "$problems" --tokenizer "$work/model" \
  --max-model-len "$NEMORL_SETTING_MAX_MODEL_LEN" --rows "$work/aime25_rows.jsonl" --config "$work/gym_eval.yaml"
(
  cd "$gym"
  "$venv/bin/gym" eval run --config "$work/gym_eval.yaml" --model "$work/model" \
    --model-url "http://127.0.0.1:$port/v1" --model-api-key EMPTY --split validation \
    --num-repeats "$NEMORL_SETTING_SAMPLES_PER_PROBLEM" --concurrency "$concurrency" \
    --temperature "$NEMORL_SETTING_TEMPERATURE" --top-p "$NEMORL_SETTING_TOP_P" --output "$work/rollouts.jsonl"
) > "$NEMORL_OUT/gym.log" 2>&1
stop_server
cp -- "$work/rollouts.jsonl" "$NEMORL_OUT/rollouts.jsonl"

# Gym writes <stem>_failures.jsonl only when a rollout failed.
"$bin" evaluate score --contamination "$report" --rollouts "$work/rollouts.jsonl" --failures "$work/rollouts_failures.jsonl" \
  --questions "$problems" --weights-sha256 "$sha" --job-id "$SLURM_JOB_ID"
