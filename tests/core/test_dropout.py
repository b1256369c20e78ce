"""Dropout in the epilogue: the documented Philox mask bit for bit, determinism across
threads and shapes, its statistics, and its errors."""
import numpy as np
import pytest

import sketchcore
from _philox import dropout_keep_mask, philox4x32_10
from _reference import random_problem, reference


def test_reference_philox_matches_known_answers():
    # Random123 kat_vectors, Philox4x32-10.
    cases = [((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
             ((0xffffffff,) * 4, (0xffffffff, 0xffffffff), (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
             ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
              (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1))]
    for counter, key, expected in cases:
        assert tuple(int(w) for w in philox4x32_10(*counter, *key)) == expected


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_mask_is_the_documented_philox_mapping(rng, dtype, p):
    x, S, U, b = random_problem(rng, (3, 7), 12, 3, 37, terms=2, dtype=dtype)
    seed = int(rng.integers(0, 2**63)) * 2 + 1
    y = sketchcore.sketched_matmul(x, S, U, bias=b, activation="gelu", dropout_p=p, seed=seed)
    plain = reference(x, S, U, b, "gelu")
    keep = dropout_keep_mask(seed, 21, 37, p).reshape(3, 7, 37)
    np.testing.assert_array_equal(y[~keep], 0)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y[keep], plain[keep] / (1 - p), rtol=tol, atol=tol)


def test_mask_holds_across_chunks_of_a_long_batch(rng):
    # r = 2048 makes each chunk 1024 rows: 2500 rows span three chunks.
    x, S, U, _ = random_problem(rng, (2500,), 4, 512, 9, terms=4, dtype=np.float64, bias=False)
    seed = 12345
    y = sketchcore.sketched_matmul(x, S, U, dropout_p=0.25, seed=seed)
    keep = dropout_keep_mask(seed, 2500, 9, 0.25)
    np.testing.assert_array_equal(y == 0, ~keep)
    np.testing.assert_allclose(y[keep], reference(x, S, U)[keep] / 0.75, rtol=1e-10, atol=1e-12)


def test_same_seed_same_output_for_any_thread_count_and_leading_shape(rng):
    x, S, U, b = random_problem(rng, (4, 250), 64, 8, 130, terms=3, dtype=np.float32)
    before = sketchcore.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            sketchcore.set_num_threads(threads)
            results.append(sketchcore.sketched_matmul(x, S, U, bias=b, activation="relu", dropout_p=0.3, seed=7))
    finally:
        sketchcore.set_num_threads(before)
    for other in results[1:]:
        np.testing.assert_array_equal(results[0], other)
    flat = sketchcore.sketched_matmul(x.reshape(1000, 64), S, U, bias=b, activation="relu", dropout_p=0.3, seed=7)
    np.testing.assert_array_equal(results[0].reshape(1000, 130) == 0, flat == 0)


def test_strided_out_gets_the_same_mask(rng):
    x, S, U, _ = random_problem(rng, (50,), 20, 4, 30, dtype=np.float64, bias=False)
    dense = sketchcore.sketched_matmul(x, S, U, dropout_p=0.5, seed=99)
    out = np.zeros((50, 60))[:, ::2]
    sketchcore.sketched_matmul(x, S, U, dropout_p=0.5, seed=99, out=out)
    np.testing.assert_array_equal(out, dense)


def test_different_seeds_give_different_masks_and_none_draws_a_fresh_one(rng):
    x, S, U, _ = random_problem(rng, (64,), 16, 4, 64, dtype=np.float32, bias=False)
    masks = [sketchcore.sketched_matmul(x, S, U, dropout_p=0.5, seed=s) == 0 for s in (1, 2)]
    masks += [sketchcore.sketched_matmul(x, S, U, dropout_p=0.5) == 0 for _ in range(2)]
    for i in range(len(masks)):
        for j in range(i + 1, len(masks)):
            assert (masks[i] != masks[j]).mean() > 0.3  # independent masks differ in ~half the places


@pytest.mark.parametrize("p", [0.05, 0.3, 0.7])
def test_drop_fraction_and_mean_are_preserved(rng, p):
    # y = 1 everywhere (bias 1, zero sketch), so dropout alone shapes the output.
    n, d_out = 400, 250
    ones = np.ones(d_out)
    y = sketchcore.sketched_matmul(np.zeros((n, 3)), np.zeros((3, 1)), np.zeros((1, d_out)), bias=ones,
                                   dropout_p=p, seed=int(rng.integers(0, 2**63)))
    count = n * d_out
    dropped = (y == 0).mean()
    sigma = np.sqrt(p * (1 - p) / count)
    assert abs(dropped - p) < 6 * sigma, (dropped, p)
    assert abs(y.mean() - 1.0) < 6 * sigma / (1 - p)
    np.testing.assert_allclose(y[y != 0], 1 / (1 - p), rtol=1e-15)


def test_p_zero_is_no_dropout_and_p_one_drops_everything(rng):
    x, S, U, b = random_problem(rng, (9,), 10, 2, 5, dtype=np.float64)
    np.testing.assert_array_equal(sketchcore.sketched_matmul(x, S, U, bias=b, dropout_p=0.0, seed=3),
                                  sketchcore.sketched_matmul(x, S, U, bias=b))
    np.testing.assert_array_equal(sketchcore.sketched_matmul(x, S, U, bias=b, dropout_p=1.0, seed=3), 0.0)


@pytest.mark.parametrize(("kwargs", "error", "fragment"), [
    (dict(dropout_p=-0.1), ValueError, "dropout_p: expected a probability in [0, 1], got -0.1"),
    (dict(dropout_p=1.5), ValueError, "dropout_p: expected a probability in [0, 1], got 1.5"),
    (dict(dropout_p=float("nan")), ValueError, "dropout_p: expected a probability in [0, 1], got nan"),
    (dict(dropout_p="0.1"), TypeError, "dropout_p: expected a real number, got str"),
    (dict(dropout_p=0.5, seed=-1), ValueError, "seed: expected an integer in [0, 2**64), got -1"),
    (dict(dropout_p=0.5, seed=2**64), ValueError, "seed: expected an integer in [0, 2**64)"),
    (dict(dropout_p=0.5, seed=1.5), TypeError, "seed: expected an int or None, got float"),
    (dict(seed=-3), ValueError, "seed: expected an integer in [0, 2**64), got -3"),
    (dict(seed=True), TypeError, "seed: expected an int or None, got bool"),
])
def test_bad_dropout_arguments(kwargs, error, fragment):
    with pytest.raises(error) as info:
        sketchcore.sketched_matmul(np.ones((2, 3)), np.ones((3, 1)), np.ones((1, 2)), **kwargs)
    assert fragment in str(info.value)
