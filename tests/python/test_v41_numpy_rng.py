# SPDX-License-Identifier: Apache-2.0
"""deepinfer's NumPy PCG64 (include/deepinfer/engram_numpy_rng.h) against NumPy itself.

DeepSeek-V4.1's Engram hash multipliers are `np.random.default_rng(10007 * layer).integers(...)`
draws (spec §5.3); the engine reproduces them in C++. The helper binary v41_numpy_rng_dump
(tests/v41/) prints what the C++ code computes; this test compares with the installed NumPy.
"""
import pathlib
import subprocess

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dump_bin(deepinfer_bin) -> str:
    build_dir = pathlib.Path(deepinfer_bin).parent
    path = build_dir / "tests" / "v41" / "v41_numpy_rng_dump"
    if not path.exists():
        pytest.fail(f"{path} not found; build the v41_numpy_rng_dump target first")
    return str(path)


def run(dump_bin, *args) -> list[int]:
    out = subprocess.run([dump_bin, *map(str, args)], check=True, capture_output=True, text=True).stdout
    return [int(line) for line in out.split()]


@pytest.mark.parametrize("seed", [0, 1, 10007, 140098, 2**32 + 5, 2**63 + 12345])
def test_seed_sequence_and_raw_stream(dump_bin, seed):
    assert run(dump_bin, "state", seed, 8) == [int(x) for x in np.random.SeedSequence(seed).generate_state(8)]
    raw = np.random.default_rng(seed).bit_generator.random_raw(50)
    assert run(dump_bin, "raw", seed, 50) == [int(x) for x in raw]


# Ranges covering every branch of NumPy's bounded sampler: a single value, the 32-bit Lemire path
# (with the buffered high halves), exactly 2^32 values, the 64-bit Lemire path, and the full range.
BOUNDS = [
    (0, 1),
    (0, 7),
    (-5, 1000),
    (0, 2**32 - 1),
    (0, 2**32),
    (0, 2**32 + 1),
    (0, (np.iinfo(np.int64).max // 99092) // 2),  # the Engram multiplier bound
    (0, (np.iinfo(np.int64).max // 3) // 2),
    (-(2**62), 2**62 + 12345),
    (-(2**63), 2**63 - 1),
]


@pytest.mark.parametrize("low,high", BOUNDS)
@pytest.mark.parametrize("seed", [0, 10007, 140098, 987654321])
def test_integers_int64(dump_bin, seed, low, high):
    want = np.random.default_rng(seed).integers(low, high, size=(64,), dtype=np.int64)
    assert run(dump_bin, "integers", seed, low, high, 64) == [int(x) for x in want]


@pytest.mark.parametrize("layer", [0, 1, 2, 14, 39])
@pytest.mark.parametrize("vocab", [99092, 3402, 1, 2**40])
def test_engram_hash_multipliers(dump_bin, layer, vocab):
    # transformers' compute_hash_multipliers for one layer.
    bound = max(1, (np.iinfo(np.int64).max // vocab) // 2)
    want = np.random.default_rng(10007 * layer).integers(low=0, high=bound, size=(4,), dtype=np.int64) * 2 + 1
    assert run(dump_bin, "multipliers", layer, 4, vocab) == [int(x) for x in want]

