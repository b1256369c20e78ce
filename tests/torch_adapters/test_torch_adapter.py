"""sketchcore.torch: custom operators (gradcheck, opcheck, torch.compile), SKLinear's init,
from_linear / sketch_model, checkpoint, state_dict, autocast and DDP (Panther's operator and
SKLinear's math: test_sklinear_operator.py)."""
import io
import warnings

import pytest

torch = pytest.importorskip("torch")
sct = pytest.importorskip("sketchcore.torch")
sct_ops = pytest.importorskip("sketchcore.torch.ops._ops")
from _reference import panther_reference  # noqa: E402

ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("dropout_p", [0.0, 0.3])
def test_gradcheck_input_factors_and_bias(activation, dropout_p):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 4, 10, dtype=torch.float64, generator=g, requires_grad=True)
    S1s, U2s = (torch.randn(2, 10, 3, dtype=torch.float64, generator=g) for _ in range(2))
    S2s, U1s = (torch.randn(2, 3, 6, dtype=torch.float64, generator=g) for _ in range(2))
    S1s.requires_grad_()
    S2s.requires_grad_()
    bias = torch.randn(6, dtype=torch.float64, generator=g, requires_grad=True)
    seed = torch.tensor(42)

    def f(x, S1s, S2s, bias):
        return sct.sketched_linear(x, torch.cat([S1s, U2s]), torch.cat([U1s, S2s]), bias, activation=activation,
                                   scale=0.25, dropout_p=dropout_p, seed=seed)

    assert torch.autograd.gradcheck(f, (x, S1s, S2s, bias))


def test_opcheck_forward_and_backward_operators():
    x = torch.randn(5, 8)
    S = torch.randn(2, 8, 3, requires_grad=True)
    U = torch.randn(2, 3, 4, requires_grad=True)
    b = torch.randn(4, requires_grad=True)
    fwd = torch.library.opcheck(torch.ops.sketchcore.sketched_linear.default, (x, S, U, b, "silu", 0.5, 0.2, torch.tensor(3)))
    assert set(fwd.values()) == {"SUCCESS"}, fwd
    y, z = torch.ops.sketchcore.sketched_linear(x, S.detach(), U.detach(), b.detach(), "silu", 0.5, 0.2, torch.tensor(3))
    bwd = torch.library.opcheck(torch.ops.sketchcore.sketched_linear_backward.default,
                                (torch.ones_like(y), x, S.detach(), U.detach(), z, b.detach(), "silu", 0.5, 0.2,
                                 torch.tensor(3), [True, True, True, True]), test_utils=("test_schema", "test_faketensor"))
    assert set(bwd.values()) == {"SUCCESS"}, bwd


@pytest.mark.parametrize("layer", ["sklinear", "lowrank_inner_silu"])
def test_torch_compile_fullgraph_matches_eager(layer):
    torch.manual_seed(0)
    first = (sct.SKLinear(16, 12, 2, 3, activation="gelu") if layer == "sklinear"
             else sct.LowRankLinear(16, 12, 5, inner_activation="silu"))
    model = torch.nn.Sequential(first, torch.nn.Linear(12, 4))
    x = torch.randn(7, 16)
    compiled = torch.compile(model, fullgraph=True)
    out = compiled(x)
    out.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    ref = model(x)
    ref.sum().backward()
    torch.testing.assert_close(out, ref)
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(g, p.grad)


def test_initialisation_from_a_dense_weight():
    torch.manual_seed(4)
    W = torch.randn(9, 20, dtype=torch.float64)
    layer = sct.SKLinear(20, 9, 2, 5, W_init=W, dtype=torch.float64)
    for t in range(2):
        torch.testing.assert_close(layer.S1s[t], W.t() @ layer.U1s[t].t())
        torch.testing.assert_close(layer.S2s[t], layer.U2s[t].t() @ W.t())


def test_from_linear_error_falls_as_low_rank_grows():
    torch.manual_seed(6)
    n = 64
    Q1, _ = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64))
    Q2, _ = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64))
    linear = torch.nn.Linear(n, n, dtype=torch.float64)
    with torch.no_grad():
        linear.weight.copy_(Q1 @ torch.diag(0.7 ** torch.arange(n, dtype=torch.float64)) @ Q2.t())
    x = torch.randn(256, n, dtype=torch.float64)
    errors = []
    for rank in (2, 8, 32):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            errs = [torch.linalg.norm(sct.SKLinear.from_linear(linear, 1, rank)(x) - linear(x)).item()
                    for _ in range(5)]
        errors.append(sum(errs) / len(errs))
    assert errors[0] > errors[1] > errors[2], errors


def test_training_converges_like_the_dense_layer():
    # The target is a sketched layer with the student's fixed buffers, so both the dense and
    # the sketched model can represent it exactly (with fixed random U1s/U2s a sketched
    # layer spans only part of all weight matrices; a generic target would leave a floor).
    torch.manual_seed(7)
    n_in, n_out = 32, 16
    teacher = sct.SKLinear(n_in, n_out, 2, 6)
    student = sct.SKLinear(n_in, n_out, 2, 6)
    with torch.no_grad():
        student.U1s.copy_(teacher.U1s)
        student.U2s.copy_(teacher.U2s)
    X = torch.randn(512, n_in)
    with torch.no_grad():
        Y = teacher(X)
    results = {}
    for name, model in (("dense", torch.nn.Linear(n_in, n_out)), ("sketched", student)):
        opt = torch.optim.Adam(model.parameters(), lr=3e-2)
        first = None
        for _ in range(400):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(X), Y)
            first = first if first is not None else loss.item()
            loss.backward()
            opt.step()
        results[name] = (first, loss.item())
    # Stated margin: both reduce the loss at least 1000× in 400 Adam steps.
    for name, (first, last) in results.items():
        assert last < first / 1000, results


def test_checkpoint_and_dropout_give_the_same_gradients():
    torch.manual_seed(8)
    layer = sct.SKLinear(10, 6, 2, 3, activation="relu", dropout=0.3, dtype=torch.float64)
    x = torch.randn(5, 10, dtype=torch.float64)
    torch.manual_seed(9)
    layer(x).sum().backward()
    plain = [p.grad.clone() for p in layer.parameters()]
    layer.zero_grad()
    torch.manual_seed(9)
    torch.utils.checkpoint.checkpoint(layer, x, use_reentrant=False).sum().backward()
    for a, p in zip(plain, layer.parameters()):
        torch.testing.assert_close(a, p.grad)


def test_state_dict_round_trip():
    torch.manual_seed(10)
    a = sct.SKLinear(10, 6, 2, 3)
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)
    buffer.seek(0)
    b = sct.SKLinear(10, 6, 2, 3)
    b.load_state_dict(torch.load(buffer))
    x = torch.randn(4, 10)
    torch.testing.assert_close(a(x), b(x))


def test_non_contiguous_inputs_and_leading_dims():
    torch.manual_seed(11)
    layer = sct.SKLinear(8, 5, 1, 2, dtype=torch.float64)
    x = torch.randn(3, 8, 6, dtype=torch.float64).transpose(1, 2)  # (3, 6, 8), non-contiguous
    ref = panther_reference(x.contiguous(), layer.S1s, layer.S2s, layer.U1s, layer.U2s, layer.bias)
    torch.testing.assert_close(layer(x), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cpu_autocast_follows_the_region_dtype(dtype):
    layer = sct.SKLinear(8, 5, 1, 2)
    x = torch.randn(4, 8)
    with torch.autocast("cpu", dtype=dtype):
        y = layer(x)
    assert y.dtype == dtype
    expected = panther_reference(x.double(), layer.S1s.double(), layer.S2s.double(), layer.U1s.double(),
                                 layer.U2s.double(), layer.bias.double())
    error = torch.linalg.norm(y.double() - expected) / torch.linalg.norm(expected)
    assert error <= (2e-2 if dtype == torch.bfloat16 else 5e-3)


@pytest.mark.parametrize("op", ["sketched_linear", "sklinear"])
def test_forward_operators_have_a_cuda_autocast_kernel(op):
    # The kernel itself runs on a CUDA device only (tests/gpu/test_gpu.py); here: it is registered.
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"sketchcore::{op}", "AutocastCUDA")
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"sketchcore::{op}", "AutocastCPU")


def test_cuda_autocast_casts_like_torchs_matmuls():
    from sketchcore.torch import _autocast_args
    x32, x64, seed = torch.ones(2), torch.ones(2, dtype=torch.float64), torch.zeros(2, dtype=torch.int64)
    cast = _autocast_args((x32, x64, seed, None, "relu", 0.5, x32.half()), "cpu", torch.bfloat16)
    assert [getattr(a, "dtype", a) for a in cast] == [torch.bfloat16, torch.float64, torch.int64, None, "relu", 0.5,
                                                     torch.bfloat16]
    assert _autocast_args((x32,), "cuda", torch.float16)[0] is x32  # other devices are left alone


def test_sketch_model_replaces_linear_layers_by_pattern():
    model = torch.nn.Sequential()
    model.add_module("encoder", torch.nn.Linear(16, 16))
    model.add_module("act", torch.nn.ReLU())
    model.add_module("head", torch.nn.Linear(16, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        replaced = sct.sketch_model(model, 1, 2, exclude=["head"])
    assert list(replaced) == ["encoder"] and isinstance(model.encoder, sct.SKLinear)
    assert type(model.head) is torch.nn.Linear
    torch.testing.assert_close(model.encoder.bias, replaced["encoder"].original.bias)
    assert sct.sketch_model(model, 1, 2, include=["nothing*"]) == {}


@pytest.mark.parametrize(("kwargs", "fragment"), [
    (dict(num_terms=0), "num_terms: expected an integer ≥ 1, got 0"),
    (dict(low_rank=0), "low_rank: expected an integer ≥ 1, got 0"),
    (dict(W_init=torch.zeros(3, 3)), "W_init: expected shape (6, 10)"),
    (dict(activation="tanh"), "activation: expected one of"),
    (dict(dropout=1.5), "dropout: expected a probability in [0, 1]"),
])
def test_bad_arguments(kwargs, fragment):
    args = dict(in_features=10, out_features=6, num_terms=1, low_rank=2)
    args.update(kwargs)
    with pytest.raises(ValueError) as info:
        sct.SKLinear(**args)
    assert fragment in str(info.value)


def test_warns_like_panther_when_larger_than_the_dense_layer():
    with pytest.warns(UserWarning) as record:
        sct.SKLinear(32, 16, 1, 6)  # 2·1·6·48 = 576 > 512: Panther warns, with its own text
    assert [str(w.message).startswith(sct.SKLinear.WARNING_MSG_FC) for w in record] == [True]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sct.SKLinear(32, 16, 1, 5)  # 480 ≤ 512: silent, as in Panther
    assert "{}" in sct.SKLinear.WARNING_MSG_TC and "{}" in sct.SKLinear.WARNING_MSG_BATCH


def _ddp_worker(rank, world, path, results):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(sct.SKLinear(12, 5, 2, 3, dtype=torch.float64))
    X = torch.randn(8, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    model(X[rank::world]).pow(2).mean().backward()
    results[rank] = [p.grad.clone() for p in model.parameters()]
    dist.destroy_process_group()


def test_distributed_data_parallel_matches_a_single_process(tmp_path):
    import torch.multiprocessing as mp
    manager = mp.Manager()
    results = manager.dict()
    mp.spawn(_ddp_worker, args=(2, str(tmp_path / "rendezvous"), results), nprocs=2, join=True)
    torch.manual_seed(0)
    single = sct.SKLinear(12, 5, 2, 3, dtype=torch.float64)
    X = torch.randn(8, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    # DDP averages the two half-batch gradients: equal to the mean over both halves.
    losses = [single(X[r::2]).pow(2).mean() for r in range(2)]
    (sum(losses) / 2).backward()
    for rank in range(2):
        for got, p in zip(results[rank], single.parameters()):
            torch.testing.assert_close(got, p.grad)


def test_factors_are_contiguous_so_view_works_as_in_panther():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layer = sct.SKLinear(10, 6, 2, 3)
    for name in ("S1s", "S2s", "U1s", "U2s"):
        tensor = getattr(layer, name)
        assert tensor.is_contiguous(), name
        assert tensor.view(-1).numel() == tensor.numel()
    # and forward still hands the core the two blocks as they are
    assert sct_ops._joined_in_place(layer.S1s, layer.U2s) and sct_ops._joined_in_place(layer.U1s, layer.S2s)


def _backward_names(t, depth=3):
    """Names of the autograd nodes within `depth` steps of t (a subclass adds alias nodes)."""
    names, frontier = [], [t.grad_fn]
    for _ in range(depth):
        frontier = [f for f in frontier if f is not None]
        names += [type(f).__name__ for f in frontier]
        frontier = [n for f in frontier for n, _ in f.next_functions]
    return names


def test_eager_calls_skip_the_dispatcher_and_the_rest_keep_the_operators():
    """Plain eager calls run the operators' bodies under autograd.Functions (_eager: the
    dispatcher's Python autograd wrapper doubled a small layer's step time), CPU autocast
    regions too (their casts made first: tests/torch_adapters/test_autocast_eager.py); tensor subclasses and
    tracing go through the custom operators. Both give the same values and gradients."""
    torch.manual_seed(0)
    layer = sct.SKLinear(12, 10, 2, 3, activation="gelu")
    x = torch.randn(5, 12, requires_grad=True)
    eager = layer(x)
    assert type(eager.grad_fn).__name__ == "SKLinearBackward"

    class Marked(torch.Tensor):
        pass

    xs = x.detach().as_subclass(Marked).requires_grad_()
    through_operator = layer(xs)
    assert any("sketchcore_sklinear" in n for n in _backward_names(through_operator))
    torch.testing.assert_close(through_operator.as_subclass(torch.Tensor), eager, rtol=0, atol=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under_autocast = layer(x)
    assert not any("sketchcore_sklinear" in n for n in _backward_names(under_autocast))
    assert "SKLinearBackward" in _backward_names(under_autocast)  # behind the output's rounding, if any
    traced = torch.jit.trace(layer, x.detach())
    assert "sketchcore::sklinear" in str(traced.graph)
    g = torch.randn_like(eager)
    grads_eager = torch.autograd.grad(eager, (x, layer.S1s, layer.S2s, layer.bias), g)
    grads_operator = torch.autograd.grad(through_operator, (xs, layer.S1s, layer.S2s, layer.bias), g)
    for a, b in zip(grads_eager, grads_operator):
        torch.testing.assert_close(a.as_subclass(torch.Tensor), b.as_subclass(torch.Tensor), rtol=1e-6, atol=1e-6)
    y = sct.sketched_linear(x, torch.randn(2, 12, 3), torch.randn(2, 3, 4))
    assert type(y.grad_fn).__name__ == "SketchedLinearBackward"


@pytest.mark.parametrize("build, message", [
    (lambda m: m.SKLinear(0, 4, num_terms=1, low_rank=2), "SKLinear: in_features: expected an integer ≥ 1, got 0"),
    (lambda m: m.LowRankLinear(8, 4, rank=True), "LowRankLinear: rank: expected an integer ≥ 1, got True"),
    (lambda m: m.SKConv2d(3, 0, kernel_size=3, num_terms=1, low_rank=2),
     "SKConv2d: out_channels: expected an integer ≥ 1, got 0"),
    (lambda m: m.SKConv2d(3, 4, kernel_size=3, num_terms=2.0, low_rank=2),
     "SKConv2d: num_terms: expected an integer ≥ 1, got 2.0"),
    (lambda m: m.RandMultiHeadAttention(8, 0, num_random_features=4),
     "RandMultiHeadAttention: num_heads: expected an integer ≥ 1, got 0"),
], ids=["sklinear", "lowrank", "skconv2d-out", "skconv2d-terms", "attention"])
def test_a_bad_size_names_the_layer_that_refused_it(build, message):
    """The layers share one check; each error names its own class (SKConv2d and the attention
    layer used to say "SKLinear")."""
    import sketchcore.torch as sct
    with pytest.raises(ValueError) as raised:
        build(sct)
    assert str(raised.value) == message
