"""A checkpoint as a graphed run on a CUDA GPU writes it, made on a machine without one: every tensor
tagged ``cuda:0`` (so ``torch.load`` without a map_location fails here, as it does on a CPU-only
machine for a real GPU run's file), Adam fused and capturable, the run's device recorded as cuda."""

import torch
import torch.serialization


def as_saved_by_a_graphed_cuda_run(src: str, dst: str) -> None:
    ckpt = torch.load(src, map_location="cpu", weights_only=False)
    optimizer = ckpt["optimizer_states"][0] if "optimizer_states" in ckpt else ckpt["optimizer"]
    for group in optimizer["param_groups"]:
        group.update(fused=True, capturable=True, foreach=False)
    if "optimizer_states" in ckpt:
        ckpt["accelerator"] = "cuda"
    tag = torch.serialization.location_tag
    torch.serialization.location_tag = lambda storage: "cuda:0"
    try:
        torch.save(ckpt, dst)
    finally:
        torch.serialization.location_tag = tag
    if not torch.cuda.is_available():  # the file really claims CUDA tensors
        try:
            torch.load(dst, weights_only=False)
        except RuntimeError as err:
            assert "CUDA" in str(err)
        else:
            raise AssertionError(f"{dst} loads without a GPU: its tensors are not tagged cuda")
