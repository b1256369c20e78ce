"""The DLPack consumer and producer: capsule kinds, byte_offset, NULL strides, flags,
versions, and deleters that run exactly once on every path."""
import gc
import sys

import numpy as np
import pytest

import sketchcore
from _fake_dlpack import IS_COPIED, READ_ONLY, FakeProducer
from _reference import assert_close, random_problem, reference
from sketchcore._dlpack import borrow


def small_problem(rng):
    return random_problem(rng, (5,), 7, 3, 4, terms=2, dtype=np.float64)


@pytest.mark.parametrize("versioned", [True, False])
def test_hand_built_capsules_are_read_and_their_deleter_runs_once(rng, versioned):
    x, S, U, b = small_problem(rng)
    producers = [FakeProducer(a, versioned=versioned) for a in (x, S, U, b)]
    y = sketchcore.sketched_matmul(*producers[:3], bias=producers[3])
    assert type(y) is np.ndarray  # unknown producers get NumPy output
    assert_close(y, reference(x, S, U, b), np.float64)
    gc.collect()
    assert [p.deleted for p in producers] == [1, 1, 1, 1]
    assert all(p.calls == [{"max_version": (1, 1)}] for p in producers)


def test_legacy_producer_without_keywords_is_called_without_them(rng):
    x, S, U, _ = small_problem(rng)
    legacy = FakeProducer(x, versioned=False, accepts_keywords=False)
    assert_close(sketchcore.sketched_matmul(legacy, S, U), reference(x, S, U), np.float64)
    assert legacy.calls == [{}]
    gc.collect()
    assert legacy.deleted == 1


def test_numpy_legacy_capsule_through_a_keywordless_wrapper(rng):
    x, S, U, _ = small_problem(rng)

    class OldStyle:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self):
            return self.a.__dlpack__()

    assert_close(sketchcore.sketched_matmul(OldStyle(x), S, U), reference(x, S, U), np.float64)


def test_byte_offset_is_honoured(rng):
    x, S, U, _ = small_problem(rng)
    buffer = np.concatenate([np.full(11, np.nan), x.ravel()])
    view = buffer[11:].reshape(x.shape)
    producer = FakeProducer(view, byte_offset_elements=11)
    assert_close(sketchcore.sketched_matmul(producer, S, U), reference(x, S, U), np.float64)
    assert borrow(FakeProducer(view, byte_offset_elements=11)).data_ptr == view.ctypes.data


def test_null_strides_mean_compact_row_major(rng):
    x, S, U, _ = small_problem(rng)
    assert_close(sketchcore.sketched_matmul(FakeProducer(x, null_strides=True), S, U), reference(x, S, U),
                 np.float64)


def test_read_only_flag_allows_input_but_refuses_out(rng):
    x, S, U, _ = small_problem(rng)
    assert_close(sketchcore.sketched_matmul(FakeProducer(x, flags=READ_ONLY), S, U), reference(x, S, U),
                 np.float64)
    out = np.zeros((5, 4))
    producer = FakeProducer(out, flags=READ_ONLY)
    with pytest.raises(ValueError, match="read-only"):
        sketchcore.sketched_matmul(x, S, U, out=producer)
    assert not out.any()
    assert producer.calls == [{"max_version": (1, 1), "copy": False}]
    gc.collect()
    assert producer.deleted == 1


def test_out_that_the_producer_copied_is_refused(rng):
    x, S, U, _ = small_problem(rng)
    with pytest.raises(ValueError, match="copy made by its DLPack producer"):
        sketchcore.sketched_matmul(x, S, U, out=FakeProducer(np.zeros((5, 4)), flags=IS_COPIED))


def test_newer_major_version_is_refused_and_released(rng):
    x, S, U, _ = small_problem(rng)
    producer = FakeProducer(x, major=2)
    with pytest.raises(BufferError, match="major version"):
        sketchcore.sketched_matmul(producer, S, U)
    gc.collect()
    assert producer.deleted == 1


@pytest.mark.skipif(sketchcore.cuda_device_count() > 0,
                    reason="host memory labelled as CUDA would reach a real device; tests/gpu/test_gpu.py covers devices")
@pytest.mark.parametrize(("device", "fragment"), [((2, 0), "cuda:0"), ((13, 1), "cuda:1")])
def test_cuda_arrays_without_backend_or_device_raise_cleanly(rng, device, fragment):
    # Host memory labelled as CUDA memory: validated like any CUDA array, then refused by a
    # CPU-only build (TypeError naming the device) or, in a CUDA build on a machine without
    # a device, by the CUDA runtime (RuntimeError) — never a crash.
    x, S, U, _ = small_problem(rng)
    out = np.empty(x.shape[:-1] + U.shape[-1:], dtype=x.dtype)
    args = [FakeProducer(a, device=device) for a in (x, S, U)]
    if sketchcore.build_info()["cuda"]:
        with pytest.raises(RuntimeError, match="sketchcore: cuda"):
            sketchcore.sketched_matmul(*args, out=FakeProducer(out, device=device))
    else:
        with pytest.raises(TypeError, match=f"x: expected an array in CPU memory .*no CUDA backend.*, got {fragment}"):
            sketchcore.sketched_matmul(*args, out=FakeProducer(out, device=device))


@pytest.mark.skipif(sketchcore.cuda_device_count() > 0,
                    reason="host memory labelled as CUDA would reach a real device; tests/gpu/test_gpu.py covers devices")
def test_cuda_arrays_are_asked_for_the_callers_stream_and_cpu_arrays_for_none(rng):
    # A CUDA producer that is neither torch nor CuPy runs on the legacy default stream,
    # which DLPack writes as 1; a CPU array must not be given a stream.
    x, S, U, _ = small_problem(rng)
    cuda_x, cuda_S = FakeProducer(x, device=(2, 0)), FakeProducer(S, device=(2, 0))
    cpu_U = FakeProducer(U)
    with pytest.raises((TypeError, RuntimeError)):
        sketchcore.sketched_matmul(cuda_x, cuda_S, cpu_U)
    assert [c.get("stream") for c in cuda_x.calls + cuda_S.calls] == [1, 1]
    assert all("stream" not in c for c in cpu_U.calls)


def test_arrays_on_different_devices_are_a_type_error(rng):
    x, S, U, _ = small_problem(rng)
    with pytest.raises(TypeError, match=r"S: expected device cpu \(the device of x\), got cuda:0"):
        sketchcore.sketched_matmul(x, FakeProducer(S, device=(2, 0)), U)


def test_unknown_device_type_is_a_type_error(rng):
    x, S, U, _ = small_problem(rng)
    producer = FakeProducer(x, device=(7, 0))  # Vulkan
    with pytest.raises(TypeError, match="x: expected an array on the CPU or a CUDA device, got DLPack device type 7"):
        sketchcore.sketched_matmul(producer, S, U)
    gc.collect()
    assert producer.deleted == 1


def test_vector_dtypes_are_refused(rng):
    x, S, U, _ = small_problem(rng)

    class Lanes(FakeProducer):
        def __dlpack__(self, **kwargs):
            capsule = super().__dlpack__(**kwargs)
            self._keep[-1][3].dl_tensor.dtype.lanes = 2
            return capsule

    with pytest.raises(TypeError, match="float32x2"):
        sketchcore.sketched_matmul(Lanes(x.astype(np.float32)), S.astype(np.float32), U.astype(np.float32))


def test_dlpack_returning_something_else_is_a_type_error(rng):
    x, S, U, _ = small_problem(rng)

    class Liar:
        def __dlpack__(self, **kwargs):
            return "not a capsule"

    with pytest.raises(TypeError, match="x: __dlpack__ returned str"):
        sketchcore.sketched_matmul(Liar(), S, U)


def test_consumed_capsule_cannot_be_reused(rng):
    x, S, U, _ = small_problem(rng)
    capsule = x.__dlpack__(max_version=(1, 1))

    class Replay:
        def __dlpack__(self, **kwargs):
            return capsule

    sketchcore.sketched_matmul(Replay(), S, U)
    with pytest.raises(TypeError, match="unconsumed"):
        sketchcore.sketched_matmul(Replay(), S, U)


def test_inputs_are_borrowed_not_copied(rng):
    x = rng.standard_normal((6, 10))
    view = x[1:, 2:]
    t = borrow(view, "x")
    assert t.data_ptr == view.ctypes.data
    assert t.shape == view.shape
    assert not t.read_only


def test_borrowing_keeps_numpy_memory_alive_until_released(rng):
    x = rng.standard_normal((3, 3))
    before = sys.getrefcount(x)
    t = borrow(x)
    assert sys.getrefcount(x) == before + 1
    del t
    gc.collect()
    assert sys.getrefcount(x) == before


# ------------------------------------------------------------------------ producer


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_buffer_is_shared_with_numpy_without_copy(dtype):
    buf = sketchcore.DLPackBuffer((3, 4), dtype)
    a = np.from_dlpack(buf)
    assert a.shape == (3, 4) and a.dtype == np.dtype(dtype)
    assert a.ctypes.data == buf.data_ptr
    assert not a.any(), "a new buffer is zero-filled"
    a[1, 2] = 5.0
    assert np.from_dlpack(buf)[1, 2] == 5.0


def test_buffer_outlives_its_python_object_while_exported():
    buf = sketchcore.DLPackBuffer((2, 2), "float64")
    before = sys.getrefcount(buf)
    a = np.from_dlpack(buf)
    assert sys.getrefcount(buf) == before + 1  # the export holds the buffer
    a[...] = 3.0
    del buf
    gc.collect()
    np.testing.assert_array_equal(a, 3.0)  # still valid memory


def test_unconsumed_capsule_releases_the_buffer():
    buf = sketchcore.DLPackBuffer((5,), "float32")
    before = sys.getrefcount(buf)
    for kwargs in ({}, {"max_version": (1, 0)}):
        capsule = buf.__dlpack__(**kwargs)
        assert sys.getrefcount(buf) == before + 1
        del capsule
        assert sys.getrefcount(buf) == before


def test_buffer_capsule_kinds_follow_max_version():
    buf = sketchcore.DLPackBuffer((2,), "float32")
    assert "dltensor_versioned" in repr(buf.__dlpack__(max_version=(1, 1)))
    assert '"dltensor"' in repr(buf.__dlpack__())
    assert '"dltensor"' in repr(buf.__dlpack__(max_version=(0, 8)))


def test_buffer_feeds_sketched_matmul_as_input_and_out(rng):
    x, S, U, _ = random_problem(rng, (3,), 4, 2, 5, dtype=np.float32, bias=False)
    xbuf = sketchcore.DLPackBuffer((3, 4), "float32")
    np.from_dlpack(xbuf)[...] = x
    out = sketchcore.DLPackBuffer((3, 5), "float32")
    assert sketchcore.sketched_matmul(xbuf, S, U, out=out) is out
    assert_close(np.from_dlpack(out), reference(x, S, U), np.float32)


def test_buffer_rejects_bad_requests():
    with pytest.raises(TypeError, match="dtype: expected one of"):
        sketchcore.DLPackBuffer((2,), "int32")
    with pytest.raises(ValueError, match="shape: expected non-negative extents"):
        sketchcore.DLPackBuffer((2, -1))
    buf = sketchcore.DLPackBuffer((2,))
    with pytest.raises(BufferError, match="stream"):
        buf.__dlpack__(stream=1)
    with pytest.raises(BufferError, match="dl_device"):
        buf.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError, match="copy=True"):
        buf.__dlpack__(copy=True)
    assert buf.__dlpack_device__() == (1, 0)


def test_plain_torch_tensors_skip_dunder_dlpack_and_others_keep_it(rng, monkeypatch):
    """Plain torch tensors (CPU here) come through torch's C++ exporter, not Tensor.__dlpack__
    and its Python layer (15-19 µs per operand on a GPU host); subclasses and tensors that
    require grad still go through __dlpack__, whose refusals stay the same."""
    torch = pytest.importorskip("torch")
    x, S, U = (torch.from_numpy(a) for a in random_problem(rng, (6,), 5, 2, 4, None)[:3])
    calls = []
    original = torch.Tensor.__dlpack__

    def counting(self, *args, **kwargs):
        calls.append(type(self).__name__)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "__dlpack__", counting)
    y = sketchcore.sketched_matmul(x, S, U)
    assert calls == [] and isinstance(y, torch.Tensor)
    assert_close(y.numpy(), reference(x.numpy(), S.numpy(), U.numpy()), np.float32)

    class Marked(torch.Tensor):
        pass

    sketchcore.sketched_matmul(x.as_subclass(Marked), S, U)
    assert calls and set(calls) == {"Marked"}  # (torch's subclass dispatch may re-enter __dlpack__)
    with pytest.raises(BufferError, match="require gradient"):
        sketchcore.sketched_matmul(x, S.clone().requires_grad_(), U)
