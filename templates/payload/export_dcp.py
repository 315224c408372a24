"""nemorl-slurm train bundle: export a NeMo RL DCP checkpoint to bf16 safetensors.

Runs inside the train image with the NeMo RL venv's Python, after training:
converts the torch.distributed checkpoint at --dcp (step_N/policy/weights) to
one torch save file, loads it back with weights_only=True, unwraps a lone
"model" key, and writes every tensor as contiguous CPU bf16 to --out with
safetensors (metadata format=pt). The temporary torch file is removed.
The launcher (nemorl-slurm payload train) hashes the result.

Usage: export_dcp.py --dcp DIR --out model.safetensors
"""

import argparse
import os
import sys
import tempfile


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--dcp", required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()

    import torch
    from safetensors.torch import save_file
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    fd, tmp = tempfile.mkstemp(suffix=".pt", dir=os.path.dirname(os.path.abspath(a.out)))
    os.close(fd)
    try:
        dcp_to_torch_save(a.dcp, tmp)
        state = torch.load(tmp, map_location="cpu", weights_only=True)
    finally:
        os.unlink(tmp)
    if isinstance(state, dict) and list(state.keys()) == ["model"]:
        state = state["model"]
    if not isinstance(state, dict) or not state:
        sys.exit(f"{a.dcp}: no tensors in the checkpoint")
    tensors = {}
    for name, t in state.items():
        if not isinstance(t, torch.Tensor):
            sys.exit(f"{a.dcp}: {name} is not a tensor")
        tensors[name] = t.detach().to(device="cpu", dtype=torch.bfloat16).contiguous()
    save_file(tensors, a.out, metadata={"format": "pt"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
