"""The text bench/pretrain.py trains on: the Python standard library's own sources, which every
Python installation has (nothing to download), as bytes (a 256-token vocabulary, no tokenizer to
train). The corpus is named by the files it read, their total size and a SHA-256 of the bytes,
recorded with every result: the same Python version gives the same corpus.

Files: every ``*.py`` under ``sysconfig.get_paths()["stdlib"]`` outside ``site-packages`` and
the test suites (``test``/``tests``/``idle_test`` directories), in sorted order of their paths
relative to that directory, read until ``max_bytes``. Every 10th file of that order (the 10th, 20th, …) goes to the
validation split (10 % of the files, spread over the library; a prefix of the order for any
``max_bytes``), the others to the training split.
"""
from __future__ import annotations

import hashlib
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch

_EXCLUDED_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}


@dataclass
class Corpus:
    train: torch.Tensor  # uint8 bytes as int64 tokens
    validation: torch.Tensor
    description: dict  # what was read: root, python version, files, bytes, sha256


def _sources(root: Path) -> list[Path]:
    files = [p for p in root.rglob("*.py") if not _EXCLUDED_DIRS.intersection(p.relative_to(root).parts[:-1])]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def load_corpus(max_bytes: int) -> Corpus:
    """The first ``max_bytes`` bytes of the standard library's sources (see the module docstring)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    train, validation = bytearray(), bytearray()
    digest = hashlib.sha256()
    used = 0
    for path in _sources(root):
        if len(train) + len(validation) >= max_bytes:
            break
        data = path.read_bytes()
        relative = path.relative_to(root).as_posix()
        digest.update(relative.encode() + b"\0" + data)
        used += 1
        (validation if used % 10 == 0 else train).extend(data)
    if not train or not validation:
        raise RuntimeError(f"pretrain_data: too little text under {root} for max_bytes={max_bytes}")
    description = {"source": "Python standard library sources (*.py)", "root": str(root),
                   "python": sys.version.split()[0], "files": used, "train_bytes": len(train),
                   "validation_bytes": len(validation), "sha256": digest.hexdigest()}
    as_tokens = lambda b: torch.frombuffer(b, dtype=torch.uint8).to(torch.int64)  # noqa: E731
    return Corpus(as_tokens(train), as_tokens(validation), description)


def batches(tokens: torch.Tensor, batch: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """`batch` random windows of `length` tokens, (batch, length)."""
    starts = torch.randint(0, tokens.numel() - length, (batch,), generator=generator)
    return torch.stack([tokens[s:s + length] for s in starts.tolist()])


def validation_batches(tokens: torch.Tensor, batch: int, length: int, count: int) -> list[torch.Tensor]:
    """`count` fixed batches of consecutive windows from the start of the validation split."""
    windows = tokens[: (tokens.numel() // length) * length].view(-1, length)
    needed = min(count * batch, windows.shape[0])
    return [windows[i:i + batch] for i in range(0, needed, batch)]
