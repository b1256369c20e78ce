"""The inputs an audit found unchecked: each now raises a clear exception naming the argument,
the expected and the actual value (never an out-of-bounds read, NumPy's anonymous message, a
silently ignored setting or a meaningless 0)."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import sketchcore
from _fake_dlpack import FakeProducer
from sketchcore import _int8


@pytest.mark.parametrize("ndim", [65, 1 << 20, 2**31 - 1, -1])
def test_dlpack_ndim_is_bounded_before_the_shape_is_read(ndim):
    # the producer's shape array holds 2 extents: a larger ndim would have been read past it
    x = FakeProducer(np.ones((2, 3), np.float32), ndim=ndim)
    S, U = np.ones((3, 2), np.float32), np.ones((2, 4), np.float32)
    with pytest.raises(ValueError, match=rf"x: .*0 <= ndim <= 64, got ndim {ndim}"):
        sketchcore.sketched_matmul(x, S, U)


def test_int8_factor_of_a_capsule_numpy_cannot_read_names_the_argument():
    q = FakeProducer(np.ones((2, 3), np.float32), ndim=-1)
    with pytest.raises(ValueError, match=r"Int8Factor: q: could not read the array through DLPack"):
        sketchcore.Int8Factor(q, np.ones(3, np.float32))


def test_int8_factor_of_a_sparse_torch_tensor_names_the_layout():
    torch = pytest.importorskip("torch")
    q = torch.ones(2, 3, dtype=torch.int8).to_sparse()  # NumPy's own error named no argument
    with pytest.raises(TypeError, match=r"Int8Factor: q: expected a dense \(strided\) tensor, got layout torch.sparse_coo"):
        sketchcore.Int8Factor(q, np.ones(3, np.float32))
    scale = torch.ones(3).to_sparse()
    with pytest.raises(TypeError, match=r"Int8Factor: scale: expected a dense \(strided\) tensor"):
        sketchcore.Int8Factor(np.ones((2, 3), np.int8), scale)


def test_int8_factor_of_a_negated_torch_view_reads_its_values():
    torch = pytest.importorskip("torch")
    q = torch.tensor([[1, -2], [3, 4]], dtype=torch.float32)
    scale = torch.tensor([0.5, 0.25]).neg().neg()  # a lazily negated view resolved before NumPy reads it
    f = sketchcore.Int8Factor(q.to(torch.int8), scale)
    np.testing.assert_array_equal(np.asarray(f.scale), [0.5, 0.25])


def _run_with_isa(value: str, code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SKETCHCORE_INT8_ISA=value)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, env=env)


def test_a_misspelt_int8_isa_environment_variable_is_refused_by_every_int8_call():
    result = _run_with_isa("avx512vnni", """
        import numpy as np, sketchcore, sketchcore._int8
        f = sketchcore.Int8Factor(np.ones((4, 2), np.int8), np.ones(2, np.float32))
        for call in (lambda: sketchcore._int8.int8_gemm_isa(),
                     lambda: sketchcore.int8_matmul(np.ones((3, 4), np.float32), f),
                     lambda: sketchcore.int8_sketched_matmul(np.ones((3, 4), np.float32), f,
                         sketchcore.Int8Factor(np.ones((2, 5), np.int8), np.ones(5, np.float32)))):
            try:
                call()
                print("accepted")
            except ValueError as e:
                print("ValueError:", e)
    """)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and "accepted" not in result.stdout, result.stdout
    for line in lines:
        assert "SKETCHCORE_INT8_ISA (environment variable)" in line and "got 'avx512vnni'" in line, line
        assert "'avx512_vnni'" in line  # the names it takes


def test_a_valid_int8_isa_environment_variable_still_caps_the_family():
    result = _run_with_isa("portable", "import sketchcore._int8 as i; print(i.int8_gemm_isa())")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "portable"


@pytest.mark.parametrize("iterations", [0, -5])
def test_int8_peak_refuses_a_count_below_one(iterations):
    with pytest.raises(ValueError, match=rf"int8_peak_macs_per_second: iterations: expected a positive count, "
                                         rf"got {iterations}"):
        _int8.int8_peak_macs_per_second("portable", iterations)


def test_layers_name_the_rank_keyword_the_other_layer_uses():
    sct = pytest.importorskip("sketchcore.torch")
    with pytest.raises(TypeError, match=r"SKLinear: rank: expected the keyword low_rank= .*got rank=8"):
        sct.SKLinear(16, 16, 1, rank=8)
    with pytest.raises(TypeError, match=r"LowRankLinear: low_rank: expected the keyword rank= .*got low_rank=8"):
        sct.LowRankLinear(16, 16, low_rank=8)
    # the right keywords still construct the layers, and the wrapper keeps the signature's name
    assert sct.SKLinear(16, 16, 1, low_rank=8).low_rank == 8
    assert sct.LowRankLinear(16, 16, rank=8).rank == 8
    assert sct.LowRankLinear.__init__.__name__ == "__init__"
