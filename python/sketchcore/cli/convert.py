"""``sketchcore convert MODEL.pt -o OUT.pt``: load a saved torch model (``torch.save(model, …)``),
compress it with ``sketchcore.torch.sketch_model``, print the per-layer report, and save the
result: by default its state_dict (tensors, with each sketched layer's configuration in the
metadata), which ``torch.load`` reads with its safe default (``weights_only=True``) and
``restore_model(YourModel(), torch.load(OUT))`` turns back into the compressed model; with
``--whole-model`` the pickled module, which only ``torch.load(..., weights_only=False)`` reads."""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sketchcore convert",
                                description="Compress the linear (and optionally convolution and attention) "
                                            "layers of a saved torch model.")
    p.add_argument("model", help="a model saved with torch.save(model, path)")
    p.add_argument("-o", "--output", required=True, help="where to save the compressed model")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--tolerance", type=float, help="largest relative weight error per layer, in [0, 1)")
    size.add_argument("--param-ratio", type=float, help="learnable parameters of each new layer / the dense one's")
    size.add_argument("--rank", type=int, help="fixed rank (k per term for sklinear)")
    p.add_argument("--layer", choices=("lowrank", "sklinear"), default="lowrank")
    p.add_argument("--num-terms", type=int, default=None, help="num_terms for --layer sklinear (default 1)")
    p.add_argument("--init", choices=("svd", "panther"), default="svd",
                   help="SKLinear's initialisation: svd (the best rank-2Tk approximation, default) or panther")
    p.add_argument("--conv2d", action="store_true", help="also convert nn.Conv2d layers (needs --layer sklinear)")
    p.add_argument("--attention", type=int, default=None, metavar="FEATURES",
                   help="turn nn.MultiheadAttention into Performer attention with this many random features")
    p.add_argument("--include", nargs="*", default=None, help="fnmatch patterns of layer names to convert")
    p.add_argument("--exclude", nargs="*", default=None, help="fnmatch patterns of layer names to keep")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import this module first (the one defining the model's classes); repeatable")
    p.add_argument("--whole-model", action="store_true",
                   help="save the pickled module (needs torch.load(..., weights_only=False)) instead of the state_dict")
    return p


def _missing_class_message(path: str, error: BaseException) -> str:
    """What to do when the pickled model names a class that cannot be imported here."""
    text = str(error)
    if "__main__" in text:
        return (f"convert: {path}: the model's class was defined in the script that saved it (__main__), so it "
                f"cannot be imported here ({text}); move the class into a module, save the model again, and pass "
                f"--import that.module (or save model.state_dict() and convert in Python with "
                f"sketchcore.torch.sketch_model)")
    return (f"convert: {path}: the model's class cannot be imported here ({type(error).__name__}: {text}); run "
            f"convert from the directory holding its code, add that directory to PYTHONPATH, or pass "
            f"--import the.module.defining.it")


def _load(path: str, imports: list[str]) -> Any:
    """The saved model, or a message (str) saying why it could not be read."""
    import torch

    sys.path.insert(0, os.getcwd())  # classes importable from the working directory, as `python -c` sees them
    for name in imports:
        try:
            importlib.import_module(name)
        except ImportError as e:
            return f"convert: --import {name}: {e}"
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except FileNotFoundError:
        return f"convert: {path}: no such file"
    except (AttributeError, ModuleNotFoundError) as e:
        return _missing_class_message(path, e)
    except Exception as e:  # noqa: BLE001 - any unreadable file gets the same clear message
        return f"convert: {path}: not a file saved by torch.save ({type(e).__name__}: {e})"


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.tolerance is None and args.param_ratio is None and args.rank is None and args.attention is None:
        parser.error("one of the arguments --tolerance --param-ratio --rank is required (or only --attention)")
    try:
        import torch
        from torch import nn

        from sketchcore.torch import sketch_model
    except ImportError:
        print("convert: needs PyTorch (pip install torch)", file=sys.stderr)
        return 2
    model = _load(args.model, args.imports)
    if isinstance(model, str):
        print(model, file=sys.stderr)
        return 2
    if not isinstance(model, nn.Module):
        print(f"convert: {args.model}: expected a whole model saved with torch.save(model, path), got "
              f"{type(model).__name__} (a state_dict cannot be converted without its architecture)", file=sys.stderr)
        return 2
    num_terms = args.num_terms if args.num_terms is not None else (1 if args.layer == "sklinear" else None)
    try:
        report = sketch_model(model, num_terms, args.rank, tolerance=args.tolerance, param_ratio=args.param_ratio,
                              layer=args.layer, include=args.include, exclude=args.exclude, init=args.init,
                              conv2d=args.conv2d, attention=args.attention)
    except ValueError as e:
        print(f"convert: {e}", file=sys.stderr)
        return 2
    print(report)
    if args.whole_model:
        torch.save(model, args.output)
        print(f"saved the whole model to {args.output}: load it with torch.load({args.output!r}, weights_only=False) "
              f"where its classes can be imported")
    else:
        torch.save(model.state_dict(), args.output)
        print(f"saved the state_dict to {args.output}: rebuild with "
              f"sketchcore.torch.restore_model(YourModel(...), torch.load({args.output!r})) "
              f"(torch.load's safe default weights_only=True reads it)")
    return 0
