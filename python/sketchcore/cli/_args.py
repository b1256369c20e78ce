"""Argument helpers shared by the subcommands that describe one layer."""
from __future__ import annotations

import argparse


def positive(text: str) -> int:
    """argparse type: an integer ≥ 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ 1, got {value}")
    return value


def add_layer_shape(parser: argparse.ArgumentParser, features: tuple[int, int], batch: tuple[int, int]) -> None:
    """--in, --out, --batch and --dtype, with (default, --quick default) sizes."""
    parser.add_argument("--in", dest="d_in", type=positive, default=None,
                        help=f"input features (default {features[0]}; quick {features[1]})")
    parser.add_argument("--out", dest="d_out", type=positive, default=None, help="output features (default = --in)")
    parser.add_argument("--batch", type=positive, default=None, help=f"rows of x (default {batch[0]}; quick {batch[1]})")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
