"""Side streams (issue 39, item 4): calls on non-default streams are ordered on those streams, and
the pool never hands a block to one stream while another still uses it. Two torch streams run
training steps of different layers at the same time (their work interleaved on the device), and
each result equals, bit for bit, the same work done alone on the default stream; CuPy's current
stream is honoured the same way. Temporaries come from the stream-ordered pool
(cudaMallocFromPoolAsync/cudaFreeAsync), whose reuse across streams CUDA orders by events; the
pool is back to zero bytes in use afterwards.

Every test here needs a CUDA device and is skipped without one.
"""
import warnings

import pytest

import sketchcore

torch = pytest.importorskip("torch")
sct = pytest.importorskip("sketchcore.torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not sketchcore.build_info()["cuda"] or sketchcore.cuda_device_count() == 0
                       or not torch.cuda.is_available(), reason="needs the CUDA backend and a CUDA device"),
]


def _layers():
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return (sct.LowRankLinear(512, 768, 64, activation="gelu").cuda(),
                sct.SKLinear(512, 384, 2, 32, activation="relu").cuda())


def _step(layer, x):
    """Forward and backward; the gradients of x and of every parameter, cloned."""
    for p in layer.parameters():
        p.grad = None
    x = x.detach().requires_grad_(True)
    y = layer(x)
    y.square().sum().backward()
    return [y.detach().clone(), x.grad.clone(), *(p.grad.clone() for p in layer.parameters() if p.grad is not None)]


def test_two_streams_at_once_give_each_streams_results_alone():
    first, second = _layers()
    gen = torch.Generator(device="cuda").manual_seed(1)
    xs = [torch.randn(2048, 512, device="cuda", generator=gen) for _ in range(4)]
    alone_first = [_step(first, x) for x in xs]
    alone_second = [_step(second, x) for x in xs]
    torch.cuda.synchronize()
    baseline = sketchcore.memory.device_stats(0)["current_bytes"]
    streams = torch.cuda.Stream(), torch.cuda.Stream()
    for stream in streams:
        stream.wait_stream(torch.cuda.current_stream())
    got_first, got_second = [], []
    for x in xs:  # enqueue alternately: the two streams' kernels and temporaries overlap in time
        with torch.cuda.stream(streams[0]):
            got_first.append(_step(first, x))
        with torch.cuda.stream(streams[1]):
            got_second.append(_step(second, x))
    torch.cuda.synchronize()
    for got, expected in ((got_first, alone_first), (got_second, alone_second)):
        for step_got, step_expected in zip(got, expected):
            for a, b in zip(step_got, step_expected):
                torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert sketchcore.memory.device_stats(0)["current_bytes"] == baseline


def test_a_stream_that_waits_on_another_sees_its_results():
    """Stream B consumes what a call on stream A produced, after an event: the call's output is
    ready in A's order, not before (a result read too early would be the zeros written first)."""
    layer, _ = _layers()
    x = torch.randn(4096, 512, device="cuda")
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    a.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(a):
        with torch.no_grad():
            y = layer(x)
        done = torch.cuda.Event()
        done.record(a)
    with torch.cuda.stream(b):
        b.wait_event(done)
        total = y.double().sum()
    torch.cuda.synchronize()
    with torch.no_grad():
        expected = layer(x).double().sum()
    torch.testing.assert_close(total, expected, rtol=0, atol=0)


def test_cupy_calls_run_on_cupys_current_stream():
    cupy = pytest.importorskip("cupy")
    rng = cupy.random.default_rng(2)
    x, S, U = rng.standard_normal((1024, 256), dtype=cupy.float32), rng.standard_normal(
        (256, 32), dtype=cupy.float32), rng.standard_normal((32, 128), dtype=cupy.float32)
    expected = sketchcore.sketched_matmul(x, S, U)
    cupy.cuda.Device().synchronize()
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(2)]
    results = []
    for stream in streams * 2:
        with stream:
            results.append(sketchcore.sketched_matmul(x, S, U))
    for stream in streams:
        stream.synchronize()
    for y in results:
        assert bool((y == expected).all())
