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


def profiled(fn, iterations, warmup):
    """A torch.profiler record (CPU and CUDA activity) of ``iterations`` calls of ``fn`` after
    ``warmup`` unrecorded ones, ending with a synchronisation."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(iterations):
            fn()
        torch.cuda.synchronize()
    return prof
