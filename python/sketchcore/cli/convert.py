"""``sketchcore convert MODEL.pt -o OUT.pt``: load a saved torch model (``torch.save(model, …)``),
compress its linear layers with ``sketchcore.torch.sketch_model``, print the per-layer report,
and save the compressed model."""
from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sketchcore convert",
                                description="Compress the nn.Linear layers of a saved torch model.")
    p.add_argument("model", help="a model saved with torch.save(model, path)")
    p.add_argument("-o", "--output", required=True, help="where to save the compressed model")
    size = p.add_mutually_exclusive_group(required=True)
    size.add_argument("--tolerance", type=float, help="largest relative weight error per layer, in [0, 1)")
    size.add_argument("--param-ratio", type=float, help="learnable parameters of each new layer / the dense one's")
    size.add_argument("--rank", type=int, help="fixed rank (k per term for sklinear)")
    p.add_argument("--layer", choices=("lowrank", "sklinear"), default="lowrank")
    p.add_argument("--num-terms", type=int, default=None, help="num_terms for --layer sklinear (default 1)")
    p.add_argument("--include", nargs="*", default=None, help="fnmatch patterns of layer names to convert")
    p.add_argument("--exclude", nargs="*", default=None, help="fnmatch patterns of layer names to keep")
    return p


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        import torch
        from torch import nn

        from sketchcore.torch import sketch_model
    except ImportError:
        print("convert: needs PyTorch (pip install torch)", file=sys.stderr)
        return 2
    try:
        model = torch.load(args.model, map_location="cpu", weights_only=False)
    except FileNotFoundError:
        print(f"convert: {args.model}: no such file", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - any unreadable file gets the same clear message
        print(f"convert: {args.model}: not a file saved by torch.save ({type(e).__name__}: {e})", file=sys.stderr)
        return 2
    if not isinstance(model, nn.Module):
        print(f"convert: {args.model}: expected a whole model saved with torch.save(model, path), got "
              f"{type(model).__name__} (a state_dict cannot be converted without its architecture)", file=sys.stderr)
        return 2
    num_terms = args.num_terms if args.num_terms is not None else (1 if args.layer == "sklinear" else None)
    try:
        report = sketch_model(model, num_terms, args.rank, tolerance=args.tolerance, param_ratio=args.param_ratio,
                              layer=args.layer, include=args.include, exclude=args.exclude)
    except ValueError as e:
        print(f"convert: {e}", file=sys.stderr)
        return 2
    print(report)
    torch.save(model, args.output)
    print(f"saved to {args.output}")
    return 0
