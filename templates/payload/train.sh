#!/bin/bash
# nemorl-slurm built-in train payload; runs inside the train image.
#
# 1. copy the pristine pinned sources (NeMo-RL/ with Gym inside it,
#    recipe.yaml, train_math.jsonl) to a private node-local work dir; the
#    image's synced venv is used as is (offline: UV_OFFLINE=1 in the image),
#    with the patched sources first on PYTHONPATH;
# 2. nemorl-slurm payload train: git apply --check, then apply the author's
#    patch; run NeMo RL's GRPO trainer with the fixed settings (8 prompts × 8
#    generations, the model, the batch, checkpointing) and the inner deadline
#    (NEMORL_DEADLINE, counted from the start of this stage); take the last
#    "Avg Reward" and the last step_N checkpoint; export it to bf16
#    model.safetensors (export_dcp.py); print the NEMORL_ENV_TRAIN_RESULT
#    record. Its exit status is 0 only when the record says ok, so a failed
#    training cancels the eval job (afterok).
#
# Inputs (NEMORL_*): PATCH (read-only), BUNDLE (train.json, export_dcp.py),
# OUT (the checkpoint directory), DEADLINE (epoch seconds).
set -euo pipefail
umask 077
: "${NEMORL_PATCH:?}" "${NEMORL_BUNDLE:?}" "${NEMORL_OUT:?}" "${NEMORL_DEADLINE:?}"
root=${NEMORL_IMAGE_ROOT:-/opt/nemorl}
bin=$root/bin/nemorl-slurm
venv=$root/src/NeMo-RL/.venv

work=$(mktemp -d "${TMPDIR:-/tmp}/nemorl-train.XXXXXX")
trap 'rm -rf -- "$work"' EXIT
cp -a -- "$root/src/recipe.yaml" "$root/src/train_math.jsonl" "$work/"
# The sources without the venv (large, and used from the image read-only).
mkdir -p "$work/NeMo-RL"
for f in "$root/src/NeMo-RL"/* "$root/src/NeMo-RL"/.[!.]*; do
  [ -e "$f" ] || continue
  [ "$(basename -- "$f")" = .venv ] && continue
  cp -a -- "$f" "$work/NeMo-RL/"
done
ln -s -- "$venv" "$work/NeMo-RL/.venv"
export PYTHONPATH="$work/NeMo-RL:$work/NeMo-RL/3rdparty/Gym-workspace/Gym${PYTHONPATH:+:$PYTHONPATH}"
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True

# The launcher runs in the background so that TERM (the job's time limit is
# near, or it was cancelled) reaches it at once: it stops the trainer and
# still prints its record.
"$bin" payload train --settings "$NEMORL_BUNDLE/train.json" --work "$work" --patch "$NEMORL_PATCH" \
  --python "$venv/bin/python" --train-data "$work/train_math.jsonl" --out "$NEMORL_OUT" \
  --export-script "$NEMORL_BUNDLE/export_dcp.py" &
launcher=$!
trap 'kill -TERM "$launcher" 2>/dev/null || true' TERM
status=0
wait "$launcher" || status=$?
while kill -0 "$launcher" 2>/dev/null; do
  status=0
  wait "$launcher" || status=$?
done
exit "$status"
