"""nemorl-slurm eval bundle: the AIME25 rows and the NeMo Gym config.

Runs inside the eval image with the NeMo RL venv's Python. Reads the 30
AIME25 questions (the image's pinned copy), builds one NeMo Gym row per
question -- the boxed-answer prompt as the only user message, and
max_output_tokens = the model's context (32768) minus the prompt's tokens
under the model's chat template -- and writes the gym config that names the
rows as the one validation dataset of math_with_judge's simple agent. The
config is JSON, which YAML loaders read as YAML.

Usage: eval_prepare.py --questions Q.jsonl --tokenizer DIR --max-model-len N
                       --rows OUT.jsonl --config OUT.yaml
"""

import argparse
import json
import os
import sys

PROMPT = "Solve the following math problem. Work step by step and put your final answer inside \\boxed{}.\n\n"


def main() -> int:
    p = argparse.ArgumentParser()
    for flag in ("--questions", "--tokenizer", "--rows", "--config"):
        p.add_argument(flag, required=True)
    p.add_argument("--max-model-len", type=int, required=True)
    a = p.parse_args()

    from transformers import AutoTokenizer  # the venv's, offline

    tok = AutoTokenizer.from_pretrained(a.tokenizer, trust_remote_code=False)
    seen = set()
    rows = []
    with open(a.questions, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            q, ans = row.get("question"), row.get("expected_answer")
            if not isinstance(q, str) or ans is None:
                sys.exit(f"{a.questions}:{n}: want question and expected_answer")
            if q in seen:
                sys.exit(f"{a.questions}:{n}: duplicate question")
            seen.add(q)
            messages = [{"role": "user", "content": PROMPT + q}]
            budget = a.max_model_len - len(tok.apply_chat_template(messages, add_generation_prompt=True))
            if budget <= 0:
                sys.exit(f"{a.questions}:{n}: the prompt fills the model's context")
            rows.append({"question": q, "expected_answer": str(ans),
                         "responses_create_params": {"input": messages, "max_output_tokens": budget}})
    if len(rows) != 30:
        sys.exit(f"{a.questions}: {len(rows)} questions, want exactly 30")
    with open(a.rows, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    config = {
        "config_paths": [
            "responses_api_models/vllm_model/configs/vllm_model.yaml",
            "resources_servers/math_with_judge/configs/math_with_judge.yaml",
        ],
        "math_with_judge_simple_agent": {"responses_api_agents": {"simple_agent": {"datasets": [
            {"name": "inner_eval", "type": "validation", "license": "TBD", "jsonl_fpath": a.rows, "num_repeats": 1},
        ]}}},
        "policy_model": {"responses_api_models": {"vllm_model": {"uses_reasoning_parser": False}}},
    }
    # The image built Gym's server venvs already: use them, never the network.
    venvs = os.environ.get("NEMORL_GYM_VENV_ROOT")
    if venvs:
        config["skip_venv_if_present"] = True
        config["uv_venv_dir"] = venvs
    with open(a.config, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
