"""``python -m sketchcore`` / ``sketchcore``: the command-line tool.

Without a subcommand it runs the built-in benchmark (``sketchcore.cli.benchmark``). Subcommands:

* ``info`` — version, build (BLAS and its threads, CUDA), devices, threads, frameworks: what a
  bug report needs;
* ``landscape`` — a sweep of num_terms × rank for one layer: time, parameters, memory, FLOPs and
  approximation error per configuration, as a table, JSON, CSV and a plot;
* ``memory`` — the memory breakdown of a sketched layer against the dense one;
* ``convert`` — compresses a saved torch model with ``sketchcore.torch.sketch_model``.

Long work shows a progress bar on stderr; Ctrl-C stops it without a traceback (exit 130).
"""
from __future__ import annotations

import sys
from typing import Callable

from sketchcore.cli.benchmark import DEFAULT_SHAPES, QUICK_SHAPES, Row, format_table, run_shape  # noqa: F401

__all__ = ["main"]


def _subcommands() -> dict[str, Callable[[list[str]], int]]:
    from sketchcore.cli import convert, info, landscape, memory
    return {"info": info.main, "landscape": landscape.main, "memory": memory.main, "convert": convert.main}


def main(argv: list[str] | None = None) -> int:
    """Runs the command line ``python -m sketchcore [SUBCOMMAND] ARGS...``.

    Parameters
    ----------
    argv : list of str, optional
        The arguments after the program name; ``None`` reads ``sys.argv[1:]``.

    Returns
    -------
    int
        The exit status: 0 on success; 2 when a subcommand cannot do its work (``convert``
        without PyTorch or with an unreadable model, ``landscape --plot`` without
        matplotlib), with the reason on stderr; 130 when interrupted with Ctrl-C.

    Raises
    ------
    SystemExit
        From argparse, for ``--help``, ``--version`` or bad arguments (status 0 or 2).

    Examples
    --------
    >>> from sketchcore.cli import main
    >>> main(["memory", "--quick"])          # doctest: +ELLIPSIS
    one training step of a 1024 × 1024 → 1024 layer ...
    0
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        commands = _subcommands()
        if args and args[0] in commands:
            return commands[args[0]](args[1:])
        from sketchcore.cli import benchmark
        return benchmark.main(args)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
