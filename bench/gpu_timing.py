"""Device timing shared by the GPU benchmarks and bench/gpu/where_time_goes.py."""
import torch


def event_median_ms(fn, repeats=20, warmup=5):
    """Median device time of one call of ``fn`` in milliseconds: CUDA events around each call,
    after ``warmup`` untimed calls (module loading, handles, plan caches)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]
