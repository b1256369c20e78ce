"""sketchcore.torch: custom operators (gradcheck, opcheck, torch.compile), SKLinear as
Panther's layer (math, init, names), from_linear / sketch_model, checkpoint, state_dict,
autocast and DDP."""
import io
import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sct = pytest.importorskip("sketchcore.torch")
sct_ops = pytest.importorskip("sketchcore.torch.ops._ops")
import sketchcore  # noqa: E402

ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")


def panther_reference(x, S1s, S2s, U1s, U2s, bias):
    """Panther's formula, term by term, in float64: 1/(2T) Σ_t [(x S1_t) U1_t + (x U2_t) S2_t] + b."""
    T = S1s.shape[0]
    total = sum((x @ S1s[t]) @ U1s[t] + (x @ U2s[t]) @ S2s[t] for t in range(T))
    return total / (2 * T) + (0 if bias is None else bias)


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


@pytest.mark.parametrize("activation", ["none", "gelu"])
@pytest.mark.parametrize("grads_of", [("x", "S1s", "S2s", "bias"), ("S1s",), ("U1s", "U2s"), ("S2s", "U2s"),
                                      ("x", "S1s", "S2s", "U1s", "U2s", "bias")])
def test_gradcheck_panther_operator_for_any_subset_of_factors(activation, grads_of):
    # Every subset exercises another pair of term ranges in the core's backward.
    g = torch.Generator().manual_seed(2)
    names = ("x", "S1s", "S2s", "U1s", "U2s", "bias")
    shapes = ((2, 3, 9), (3, 9, 2), (3, 2, 5), (3, 2, 5), (3, 9, 2), (5,))
    values = {n: torch.randn(s, dtype=torch.float64, generator=g, requires_grad=n in grads_of)
              for n, s in zip(names, shapes)}
    seed = torch.tensor(7)

    def f(*args):
        return sct.sklinear(*args, activation=activation, dropout_p=0.25, seed=seed)

    assert torch.autograd.gradcheck(f, tuple(values[n] for n in names))


def test_panther_operator_matches_the_float64_formula():
    torch.manual_seed(3)
    x = torch.randn(6, 11, dtype=torch.float64)
    S1s, U2s = torch.randn(2, 2, 11, 4, dtype=torch.float64)
    S2s, U1s = torch.randn(2, 2, 4, 7, dtype=torch.float64)
    bias = torch.randn(7, dtype=torch.float64)
    torch.testing.assert_close(sct.sklinear(x, S1s, S2s, U1s, U2s, bias, activation="relu"),
                               torch.relu(panther_reference(x, S1s, S2s, U1s, U2s, bias)), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize(("shapes", "fragment"), [
    (((2, 9, 3), (2, 3, 5), (2, 3, 5), (9, 3)), "U2s: expected a 3-D tensor (T = 2, ., .) like S1s, got shape (9, 3)"),
    (((2, 9, 3), (1, 3, 5), (2, 3, 5), (2, 9, 3)), "S2s: expected a 3-D tensor (T = 2, ., .) like S1s"),
    (((2, 9, 3), (2, 3, 5), (2, 3, 4), (2, 9, 3)), "expected U2s shaped like S1s (2, 9, 3) and U1s like S2s (2, 3, 5)"),
])
def test_panther_operator_rejects_mismatched_factors(shapes, fragment):
    with pytest.raises(ValueError) as info:
        sct.sklinear(torch.ones(2, 9), *(torch.ones(s) for s in shapes))
    assert fragment in str(info.value)
    with pytest.raises(ValueError, match="sklinear: activation: expected one of"):
        sct.sklinear(torch.ones(2, 9), *(torch.ones(s) for s in ((1, 9, 3), (1, 3, 5), (1, 3, 5), (1, 9, 3))),
                     activation="tanh")


def _factors_share_memory(layer):
    return sct_ops._joined_in_place(layer.S1s, layer.U2s) and sct_ops._joined_in_place(layer.U1s, layer.S2s)


def test_layer_factors_are_joined_so_forward_copies_nothing():
    layer = sct.SKLinear(10, 6, 3, 2)
    assert _factors_share_memory(layer)
    joined = sct_ops._joined(layer.S1s, layer.U2s)
    assert joined.data_ptr() == layer.S1s.data_ptr() and joined.shape == (6, 10, 2)
    torch.testing.assert_close(joined, torch.cat([layer.S1s, layer.U2s]), rtol=0, atol=0)
    # Copies where the layout does not hold, with the same values.
    apart = sct_ops._joined(layer.S1s.detach().clone(), layer.U2s.clone())
    assert apart.data_ptr() != layer.S1s.data_ptr()
    torch.testing.assert_close(apart, joined, rtol=0, atol=0)


def test_layout_survives_conversion_optimiser_steps_and_loading():
    torch.manual_seed(12)
    layer = sct.SKLinear(10, 6, 2, 3)
    x = torch.randn(5, 10, dtype=torch.float64)
    opt = torch.optim.Adam(layer.parameters(), lr=0.1)
    layer(x.float()).sum().backward()
    opt.step()
    assert _factors_share_memory(layer)
    params = [id(p) for p in layer.parameters()]
    layer.double()
    assert _factors_share_memory(layer) and layer.S1s.dtype == torch.float64
    assert [id(p) for p in layer.parameters()] == params  # the optimiser's references stay valid
    expected = panther_reference(x, layer.S1s, layer.S2s, layer.U1s, layer.U2s, layer.bias)
    torch.testing.assert_close(layer(x), expected, rtol=1e-12, atol=1e-12)
    other = sct.SKLinear(10, 6, 2, 3, dtype=torch.float64)
    other.load_state_dict(layer.state_dict())
    assert _factors_share_memory(other)
    torch.testing.assert_close(other(x), expected, rtol=1e-12, atol=1e-12)
    assigned = sct.SKLinear(10, 6, 2, 3, dtype=torch.float64)
    assigned.load_state_dict({k: v.clone() if isinstance(v, torch.Tensor) else v
                              for k, v in layer.state_dict().items()}, assign=True)
    assert not _factors_share_memory(assigned)  # still correct, through one concatenation per call
    torch.testing.assert_close(assigned(x), expected, rtol=1e-12, atol=1e-12)


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


def test_opcheck_panther_operators():
    x = torch.randn(5, 8)
    S1s, U2s = torch.randn(2, 2, 8, 3)
    S2s, U1s = torch.randn(2, 2, 3, 4)
    b = torch.randn(4)
    seed = torch.tensor(5)
    fwd = torch.library.opcheck(torch.ops.sketchcore.sklinear.default,
                                (x, S1s.requires_grad_(), S2s.requires_grad_(), U1s, U2s, b, "relu", 0.2, seed))
    assert set(fwd.values()) == {"SUCCESS"}, fwd
    y, z = torch.ops.sketchcore.sklinear(x, S1s.detach(), S2s.detach(), U1s, U2s, b, "relu", 0.2, seed)
    for needs in ([True, True, True, False, False, True], [False, True, True, True, True, False]):
        bwd = torch.library.opcheck(torch.ops.sketchcore.sklinear_backward.default,
                                    (torch.ones_like(y), x, S1s.detach(), S2s.detach(), U1s, U2s, z, b, "relu", 0.2,
                                     seed, needs), test_utils=("test_schema", "test_faketensor"))
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


def test_sklinear_is_panthers_math_with_its_names_and_shapes():
    torch.manual_seed(3)
    layer = sct.SKLinear(20, 9, num_terms=3, low_rank=4, activation=None, dtype=torch.float64)
    names = dict(layer.named_parameters())
    assert set(names) == {"S1s", "S2s", "bias"}
    assert set(dict(layer.named_buffers())) == {"U1s", "U2s"}
    assert layer.S1s.shape == (3, 20, 4) and layer.S2s.shape == (3, 4, 9)
    assert layer.U1s.shape == (3, 4, 9) and layer.U2s.shape == (3, 20, 4)
    np.testing.assert_allclose(layer.U1s.abs().numpy(), 0.5)  # ±1/√k with k = 4
    x = torch.randn(2, 5, 20, dtype=torch.float64, requires_grad=True)
    y = layer(x)
    ref_x = x.detach().clone().requires_grad_()
    params = [p.detach().clone().requires_grad_() for p in (layer.S1s, layer.S2s, layer.bias)]
    ref = panther_reference(ref_x, params[0], params[1], layer.U1s, layer.U2s, params[2])
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    w = torch.randn_like(y)
    (y * w).sum().backward()
    (ref * w).sum().backward()
    torch.testing.assert_close(x.grad, ref_x.grad, rtol=1e-12, atol=1e-12)
    for p, r in zip((layer.S1s, layer.S2s, layer.bias), params):
        torch.testing.assert_close(p.grad, r.grad, rtol=1e-12, atol=1e-12)


def test_initialisation_from_a_dense_weight():
    torch.manual_seed(4)
    W = torch.randn(9, 20, dtype=torch.float64)
    layer = sct.SKLinear(20, 9, 2, 5, W_init=W, dtype=torch.float64)
    for t in range(2):
        torch.testing.assert_close(layer.S1s[t], W.t() @ layer.U1s[t].t())
        torch.testing.assert_close(layer.S2s[t], layer.U2s[t].t() @ W.t())


def test_functional_sklinear_matches_the_module_and_works_on_numpy():
    torch.manual_seed(5)
    layer = sct.SKLinear(12, 7, 2, 3, dtype=torch.float64)
    x = torch.randn(4, 12, dtype=torch.float64)
    args = (layer.S1s.detach(), layer.S2s.detach(), layer.U1s, layer.U2s, layer.bias.detach())
    torch.testing.assert_close(sketchcore.sklinear(x, *args), layer(x).detach(), rtol=1e-13, atol=1e-13)
    y = sketchcore.sklinear(x.numpy(), *(a.numpy() for a in args), activation="relu")
    assert isinstance(y, np.ndarray)
    np.testing.assert_allclose(y, np.maximum(panther_reference(x, *args[:4], args[4]).numpy(), 0), atol=1e-13)
    with pytest.raises(ValueError, match="same number of terms"):
        sketchcore.sklinear(x, args[0], args[1][:1], *args[2:])


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
    assert _factors_share_memory(layer)  # and forward still hands the core the two blocks as they are


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
