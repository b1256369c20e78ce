"""State dicts between Panther's own layers and sketchcore's, both ways, with ``strict=True``.

Usage: ``python bench/panther_checkpoints.py PATH/TO/panther`` (a checkout of Panther's
repository; nothing of it is installed or committed here). Panther's layer modules import
``pawX``, its compiled extension, at import time; the modules are loaded with ``pawX`` replaced
by a stand-in that provides only what construction needs (Panther's random-sign sketch
generator and a projection matrix of the right shape), so the state dicts are Panther's real
ones: its parameter and buffer names, shapes and registration. Each check prints one line and
the script exits non-zero on the first failure.
"""
from __future__ import annotations

import importlib
import io
import math
import sys
import types
import warnings

import torch

import sketchcore.torch as sct


def _stub_pawx() -> None:
    pawx = types.ModuleType("pawX")
    pawx.sinSRPE = type("sinSRPE", (), {})
    for name in ("count_skop cqrrpt randomized_svd sketched_linear_backward sketched_linear_forward rmha_forward "
                 "dense_sketch_operator gaussian_skop sjlt_skop sketch_tensor sketched_conv2d_forward "
                 "sparse_sketch_operator srht DistributionFamily Axis").split():
        setattr(pawx, name, None)
    pawx.scaled_sign_sketch = lambda m, n, device=None, dtype=None: (
        (torch.randint(0, 2, (m, n), device=device) * 2 - 1).to(dtype or torch.float32) / math.sqrt(m))
    pawx.create_projection_matrix = lambda m, d, *args, **kwargs: torch.randn(
        m, d, **{k: v for k, v in kwargs.items() if k in ("dtype", "device")})
    sys.modules["pawX"] = pawx
    return pawx


def _load_panther(root: str):
    """Panther's layer modules, without running its package __init__ (which imports every
    compiled function)."""
    pawx = _stub_pawx()
    for package in ("panther", "panther.nn", "panther.sketch", "panther.utils", "panther.nn.linear_kernels"):
        module = types.ModuleType(package)
        module.__path__ = [f"{root}/{package.replace('.', '/')}"]
        sys.modules[package] = module
    sys.modules["panther.sketch"].scaled_sign_sketch = pawx.scaled_sign_sketch
    return (importlib.import_module("panther.nn.linear"), importlib.import_module("panther.nn.conv2d"),
            importlib.import_module("panther.nn.attention"))


def _through_disk(state):
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def main(root: str) -> int:
    warnings.simplefilter("ignore")
    linear, conv, attention = _load_panther(root)
    torch.manual_seed(0)
    pairs = [
        ("SKLinear", lambda: linear.SKLinear(64, 48, 2, 8), lambda: sct.SKLinear(64, 48, 2, 8, activation="relu")),
        ("SKConv2d", lambda: conv.SKConv2d(8, 16, (3, 3), num_terms=2, low_rank=4),
         lambda: sct.SKConv2d(8, 16, (3, 3), num_terms=2, low_rank=4)),
        ("RandMultiHeadAttention", lambda: attention.RandMultiHeadAttention(32, 4, 16),
         lambda: sct.RandMultiHeadAttention(32, 4, 16)),
    ]
    for name, panthers, ours in pairs:
        theirs, mine = panthers(), ours()
        mine.load_state_dict(_through_disk(theirs.state_dict()), strict=True)
        same = all(torch.equal(v, mine.state_dict()[k]) for k, v in theirs.state_dict().items())
        back = panthers()
        back.load_state_dict(_through_disk(mine.state_dict()), strict=True)
        print(f"{name}: Panther → sketchcore strict, tensors equal: {same}; sketchcore → Panther strict: ok; "
              f"keys {sorted(theirs.state_dict())}")
        if not same:
            return 1
    layer, panthers_layer = sct.SKLinear(64, 48, 2, 8), linear.SKLinear(64, 48, 2, 8)
    layer.load_state_dict(panthers_layer.state_dict())
    x = torch.randn(5, 64)
    p = panthers_layer
    reference = sum((x @ p.S1s[t]) @ p.U1s[t] + (x @ p.U2s[t]) @ p.S2s[t] for t in range(2)) / 4 + p.bias
    error = float((layer(x) - reference).abs().max())
    print(f"SKLinear with Panther's tensors vs Panther's formula: max abs difference {error:.2e}")
    return 0 if error < 1e-5 else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
