"""Tensor parallelism of sketched layers against dense ones: bytes communicated (measured with
CommDebugMode, forward and backward) and step time (forward + backward), per layer and per model,
on 2 and 4 local processes (gloo on the CPU, or NCCL with --backend nccl on GPUs).

    python bench/tp_comm.py --ranks 2 4 --out bench/results/tp-gloo-DATE.json

Layers (d → d, rank k, n rows): dense ``nn.Linear`` under torch's ColwiseParallel and
RowwiseParallel; ``LowRankLinear`` under sketchcore's ColwiseParallel, RowwiseParallel (the n × k
intermediate all-reduced) and RankParallel. Models: a LLaMA (transformers, random weights) with
``llama_plan``, dense and with LowRankLinear projections. Times are medians of --repeats steps
after --warmup, with the min and max; bytes are per rank per step, from rank 0.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import socket
import statistics
import sys
import time
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel as TorchColwise
from torch.distributed.tensor.parallel import RowwiseParallel as TorchRowwise
from torch.distributed.tensor.parallel import parallelize_module

from sketchcore.torch import LowRankLinear
from sketchcore.torch.parallel._comm import CollectiveLog
from sketchcore.torch.parallel import ColwiseParallel, RankParallel, RowwiseParallel, llama_plan


def _loss(y: torch.Tensor) -> torch.Tensor:
    return y if y.dim() == 0 else y.float().pow(2).mean()


def _measure(module: nn.Module, make_input: Callable[[], torch.Tensor], warmup: int, repeats: int) -> dict[str, Any]:
    x = make_input()
    forward, backward = CollectiveLog(), CollectiveLog()
    with forward:
        y = module(x)
    loss = _loss(y)
    with backward:
        loss.backward()
    times = []
    for i in range(warmup + repeats):
        dist.barrier()
        start = time.perf_counter()
        out = module(x)
        _loss(out).backward()
        elapsed = time.perf_counter() - start
        if i >= warmup:
            times.append(elapsed)
    return {"forward_bytes": forward.total_bytes, "backward_bytes": backward.total_bytes,
            "forward_collectives": [[c.name, list(c.shapes)] for c in forward.calls],
            "backward_collectives": [[c.name, list(c.shapes)] for c in backward.calls],
            "step_ms_median": 1e3 * statistics.median(times), "step_ms_min": 1e3 * min(times),
            "step_ms_max": 1e3 * max(times)}


def _layers(d: int, k: int) -> list[tuple[str, Callable[[], nn.Module], Any, bool]]:
    """(name, layer factory, style, input sharded by columns)."""
    return [("dense colwise (torch)", lambda: nn.Linear(d, d), TorchColwise(), False),
            ("dense rowwise (torch)", lambda: nn.Linear(d, d), TorchRowwise(), True),
            ("lowrank colwise", lambda: LowRankLinear(d, d, k), ColwiseParallel(), False),
            ("lowrank rowwise (n x k all-reduce)", lambda: LowRankLinear(d, d, k), RowwiseParallel(), True),
            ("lowrank rank-sharded", lambda: LowRankLinear(d, d, k), RankParallel(), False)]


def _llama(hidden: int, rank: int, sketched: bool) -> nn.Module:
    import transformers
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=hidden, intermediate_size=2 * hidden,
                                      num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=8,
                                      attn_implementation="eager")
    model = transformers.LlamaForCausalLM(config)
    if sketched:
        for layer in model.model.layers:
            for parent in (layer.self_attn, layer.mlp):
                for name, child in list(parent.named_children()):
                    if isinstance(child, nn.Linear):
                        setattr(parent, name, LowRankLinear(child.in_features, child.out_features, rank,
                                                            bias=child.bias is not None))
    return model


def _worker(rank: int, world: int, port: int, args: argparse.Namespace, queue: Any) -> None:
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port)})
    torch.set_num_threads(max(1, args.threads))
    dist.init_process_group(args.backend)
    mesh = init_device_mesh("cpu" if args.backend == "gloo" else "cuda", (world,))
    results = []
    n, d, k = args.rows, args.d, args.k
    for name, factory, style, sharded_input in _layers(d, k):
        torch.manual_seed(0)
        module = parallelize_module(factory(), mesh, copy.deepcopy(style))
        cols = d // world if sharded_input else d
        # the input requires grad, as inside a model (torch's column-parallel layer reduces dx then)
        result = _measure(module, lambda: torch.randn(n, cols, requires_grad=True), args.warmup, args.repeats)
        results.append({"kind": "layer", "name": name, "n": n, "d": d, "k": k, **result})
    for sketched in (False, True):
        torch.manual_seed(0)
        model = _llama(args.hidden, args.model_rank, sketched)
        model = parallelize_module(model, mesh, llama_plan(model))
        ids = torch.randint(0, 256, (args.batch, args.seq))
        result = _measure(lambda t: model(input_ids=t, labels=t).loss, lambda: ids, args.warmup, args.repeats)
        results.append({"kind": "model", "name": f"llama {'lowrank' if sketched else 'dense'} (llama_plan)",
                        "hidden": args.hidden, "rank": args.model_rank if sketched else None,
                        "tokens": args.batch * args.seq, **result})
    if rank == 0:
        queue.put(results)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--d", type=int, default=1024)
    parser.add_argument("--k", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--model-rank", type=int, default=64)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out")
    args = parser.parse_args()
    report = {"command": "python bench/tp_comm.py " + " ".join(sys.argv[1:]),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "backend": args.backend, "torch": torch.__version__, "cpus": os.cpu_count(),
              "load_before": os.getloadavg(), "runs": {}}
    context = mp.get_context("spawn")
    for world in args.ranks:
        queue = context.SimpleQueue()
        mp.start_processes(_worker, args=(world, _free_port(), args, queue), nprocs=world, start_method="spawn")
        report["runs"][str(world)] = queue.get()
    report["load_after"] = os.getloadavg()
    text = json.dumps(report, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    for world, results in report["runs"].items():
        print(f"\n{world} ranks ({args.backend}): bytes per rank per step, step time median [min, max] ms")
        for r in results:
            print(f"  {r['name']:38s} fwd {r['forward_bytes']:>9d} B  bwd {r['backward_bytes']:>9d} B  "
                  f"{r['step_ms_median']:8.2f} [{r['step_ms_min']:.2f}, {r['step_ms_max']:.2f}]")


if __name__ == "__main__":
    main()
