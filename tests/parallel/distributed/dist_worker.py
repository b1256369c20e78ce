"""The body of a worker process: joins the gloo group the launcher set up, runs the named
checks of its module in order, and exits non-zero with the traceback on the first failure."""
from __future__ import annotations

import datetime
import sys
import traceback
from typing import Any, Callable


def main(checks: dict[str, Callable[[], Any]]) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=45))
    try:
        for name in sys.argv[1:]:
            checks[name]()
            print(f"rank {dist.get_rank()}: {name} ok", flush=True)
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        import os
        os._exit(1)  # no barrier in destroy_process_group: the other ranks may be stuck
    dist.destroy_process_group()
