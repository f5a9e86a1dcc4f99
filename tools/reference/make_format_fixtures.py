#!/usr/bin/env python3
"""Number-format ground-truth fixtures for deepinfer (bf16 / f16 / e4m3fn / e2m1fn / e8m0 / block dequant /
activation quantization).

Usage:
    python3 tools/reference/make_format_fixtures.py --out DIR

Writes DIR/formats.safetensors (safetensors.torch.save_file). Every tensor is computed on the CPU only, from
integer-constructed inputs (no libm, no GPU), so the file content is the same on every machine; the script
cross-checks every torch conversion against an independent implementation (ml_dtypes, numpy, or plain integer
arithmetic) and fails loudly if they disagree. See tools/reference/README.md for the meaning of each tensor.

Semantics captured here (torch 2.11 CPU, ml_dtypes 0.6; verified by the asserts below):

* f32 -> bf16 / f16 (torch `.to`): IEEE round-to-nearest-even, f32 denormal inputs handled exactly (no FTZ),
  overflow rounds to +-inf (bf16: x >= 0x7F7F8000 as f32 bits, i.e. max + half ulp, goes to inf because the max
  mantissa is odd; f16: |x| >= 65520 -> inf).
  NaN: torch's NaN *bit pattern* is path-dependent (the vectorized CPU bf16 path returns 0xFFFF for every NaN,
  the scalar c10 path 0x7FC0; f16 keeps the sign and payload bits). The fixtures therefore store canonical
  NaNs: bf16 0x7FC0, f16 0x7E00, e4m3 0x7F, f32 0x7FC00000. Tests must compare NaN outputs as "is NaN".
* f32 -> float8_e4m3fn (torch `.to`, c10::Float8_e4m3fn, identical to ml_dtypes.float8_e4m3fn): round to
  nearest even on the e4m3 grid *without saturation*: 448 < |x| <= 464 rounds to +-448 (464 is the tie between
  448 = 1.110b*2^8 and the non-existent 480 = 1.111b*2^8 and goes to the even mantissa), |x| > 464 (including
  +-inf and anything >= 480) becomes NaN (0x7F / 0xFF, the sign is kept; stored canonicalized as 0x7F).
  NaN -> NaN. Denormals: grid step 2^-9 below 2^-6; |x| <= 2^-10 rounds to +-0 (tie to even).
  `e4m3_from_f32_satfinite` = clamp(x, -448, 448) then cast (NaN stays NaN), i.e. the saturating conversion the
  official act_quant kernels perform (they clamp before the cast).
* f32 -> float4_e2m1fn (ml_dtypes 0.6): round to nearest even on {0, .5, 1, 1.5, 2, 3, 4, 6}; the format has
  no inf/NaN and ml_dtypes SATURATES overflow (|x| > 6, including +-inf, gives +-6 = code 7 / 15). NaN inputs
  give a meaningless code: ml_dtypes returns 8 (-0) for a NaN with the sign bit clear and 0 (+0) for a NaN
  with the sign bit set. Tests should skip NaN inputs for e2m1. Negative values that round to zero give code 8
  (-0). Codes are 0..15, bit 3 = sign, bits 2..1 = exponent, bit 0 = mantissa.
* float8_e8m0fnu -> f32 (torch): 2^(code-127), code 0 = 2^-127 (an f32 denormal, not flushed), 255 = NaN.
"""
import argparse
import datetime
import hashlib
import json
import os
import sys

import numpy as np
import torch

try:
    import ml_dtypes

    HAVE_ML_DTYPES = True
except ImportError:  # documented fallback: numpy implementation of e2m1, fewer cross-checks
    ml_dtypes = None
    HAVE_ML_DTYPES = False

from safetensors.torch import save_file

SEED = 20261101
N_INPUTS = 20000

E2M1_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float64)


# ----------------------------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------------------------
def f32_from_bits(bits):
    return np.asarray(bits, dtype=np.uint64).astype(np.uint32).view(np.float32)


def bits_of_f32(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def f32_ulp_neighbors(x):
    """x (positive finite f32) -> (x-1ulp, x, x+1ulp) via the bit pattern."""
    b = int(bits_of_f32(np.float32(x)))
    out = [b]
    if b > 0:
        out.append(b - 1)
    if b < 0x7F7FFFFF:
        out.append(b + 1)
    return out


def torch_from_np(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def canon_nan_bf16(t):
    t = t.clone()
    bits = t.view(torch.int16)
    bits[torch.isnan(t)] = 0x7FC0
    return t


def canon_nan_f16(t):
    t = t.clone()
    bits = t.view(torch.int16)
    bits[torch.isnan(t)] = 0x7E00
    return t


def canon_nan_e4m3(t):
    u = t.view(torch.uint8).clone()
    u[(u & 0x7F) == 0x7F] = 0x7F
    return u.view(torch.float8_e4m3fn)


def canon_nan_f32(t):
    t = t.clone()
    t.view(torch.int32)[torch.isnan(t)] = 0x7FC00000
    return t


def e2m1_codes_numpy(x):
    """Independent f32 -> e2m1 code implementation (documented fallback and cross-check of ml_dtypes).

    Round to nearest, ties to the even code, saturate to +-6, sign bit -> bit 3 (also for results of 0).
    NaN: mimics ml_dtypes (sign clear -> 8, sign set -> 0); the value is meaningless either way.
    """
    x = np.asarray(x, dtype=np.float32)
    sign = (bits_of_f32(x) >> 31).astype(np.uint8)
    a = np.abs(x.astype(np.float64))
    nan = np.isnan(a)
    a = np.where(nan, 0.0, np.minimum(a, 6.0))
    d = np.abs(a[:, None] - E2M1_VALUES[None, :])  # exact in f64 (inputs are f32)
    best = np.argmin(d, axis=1)  # first minimum = lower code
    dmin = d[np.arange(len(a)), best]
    # tie with the next code up: choose the even code
    nxt = np.minimum(best + 1, 7)
    tie = (nxt != best) & (d[np.arange(len(a)), nxt] == dmin)
    code = np.where(tie & (best % 2 == 1), nxt, best).astype(np.uint8)
    code = code | (sign << 3)
    code = np.where(nan, np.where(sign == 1, 0, 8), code).astype(np.uint8)
    return code


def e2m1_codes(x):
    if HAVE_ML_DTYPES:
        c = np.asarray(x, dtype=np.float32).astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
        assert int(c.max()) <= 15
        return c.copy()
    return e2m1_codes_numpy(x)


def e2m1_decode_bits(codes):
    """Decode e2m1 codes from the bit layout (independent of any table)."""
    codes = np.asarray(codes, dtype=np.int64)
    s = (codes >> 3) & 1
    e = (codes >> 1) & 3
    m = codes & 1
    mag = np.where(e == 0, m * 0.5, np.ldexp(1.0 + m * 0.5, e - 1))
    return np.where(s == 1, -mag, mag).astype(np.float32)


def e2m1_decode(codes):
    if HAVE_ML_DTYPES:
        return np.asarray(codes, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    return e2m1_decode_bits(codes)


# ----------------------------------------------------------------------------------------------------------------
# f32 input vector
# ----------------------------------------------------------------------------------------------------------------
def build_inputs(rng):
    sections = []  # (name, list of uint32 bit patterns)

    # 1. special values
    special = [
        0x00000000, 0x80000000,  # +-0
        0x7F800000, 0xFF800000,  # +-inf
        0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FBFFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FC00001,  # NaNs
        0x00800000, 0x80800000,  # smallest normal
        0x7F7FFFFF, 0xFF7FFFFF,  # largest normal
        0x00000001, 0x80000001,  # smallest denormal
        0x007FFFFF, 0x807FFFFF,  # largest denormal
        0x00400000, 0x80400000,  # a mid denormal
        0x3F800000, 0xBF800000, 0x3F800001, 0x3F7FFFFF,  # 1 and neighbours
    ]
    sections.append(("special", special))

    # 2. powers of two and +-1 ulp, both signs
    p2 = []
    for k in range(-149, 128):
        b = (1 << (k + 149)) if k < -126 else ((k + 127) << 23)
        for bb in (b - 1, b, b + 1):
            if 0 < bb <= 0x7F7FFFFF:
                p2 += [bb, bb | 0x80000000]
    sections.append(("pow2_ulp", p2))

    # 3. bf16 ties: for bf16 pattern p, the f32 tie between p and p+1 is (p << 16) | 0x8000.
    bf = []
    for e in range(0, 255):
        mants = [0x00, 0x01, 0x7F, int(rng.integers(2, 0x7F))]
        for m in mants:
            p = (e << 7) | m
            tie = (p << 16) | 0x8000
            vals = [tie - 1, tie, tie + 1, p << 16]
            signs = (0, 1) if e in (0, 1, 254) else (int(rng.integers(0, 2)),)
            for s in signs:
                bf += [v | (s << 31) for v in vals]
    sections.append(("bf16_ties", bf))

    # 4. f16 ties: midpoint of consecutive f16 values (exact in f32); virtual successor of 65504 is 65536.
    f16 = []
    for e in range(0, 31):
        mants = [0, 1, 2, 0x1FF, 0x200, 0x3FE, 0x3FF] + [int(v) for v in rng.integers(3, 0x1FF, 3)]
        for m in mants:
            p = (e << 10) | m
            a = float(np.uint16(p).view(np.float16))
            b = 65536.0 if p == 0x7BFF else float(np.uint16(p + 1).view(np.float16))
            mid = np.float32((a + b) / 2)
            assert float(mid) == (a + b) / 2
            vals = f32_ulp_neighbors(mid) + [int(bits_of_f32(np.float32(a)))]
            for s in (0, 1):
                f16 += [v | (s << 31) for v in vals]
    sections.append(("f16_ties", f16))

    # 5. e4m3fn: every finite code, its midpoint with the next code (virtual successor of 448 is 480)
    e4 = []
    vals_e4 = torch.arange(0, 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy().astype(np.float64)
    for i, a in enumerate(vals_e4):
        b = 480.0 if i == 0x7E else vals_e4[i + 1]
        mid = np.float32((a + b) / 2)
        assert float(mid) == (a + b) / 2
        vals = f32_ulp_neighbors(mid) + [int(bits_of_f32(np.float32(a)))]
        for s in (0, 1):
            e4 += [v | (s << 31) for v in vals]
    for x in [448.0, 456.0, 472.0, 480.0, 496.0, 512.0, 1000.0, 65504.0, 1e6, 3e38,
              2.0 ** -6, 2.0 ** -7, 2.0 ** -9, 2.0 ** -10, 2.0 ** -11, 2.0 ** -12, 1.5 * 2.0 ** -10, 2.0 ** -20]:
        for b in f32_ulp_neighbors(x):
            e4 += [b, b | 0x80000000]
    sections.append(("e4m3_ties", e4))

    # 6. e2m1: every code, its midpoint with the next code (virtual successor of 6 is 8)
    e2 = []
    for i, a in enumerate(E2M1_VALUES):
        b = 8.0 if i == 7 else E2M1_VALUES[i + 1]
        mid = np.float32((a + b) / 2)
        vals = f32_ulp_neighbors(mid) + [int(bits_of_f32(np.float32(a)))]
        for s in (0, 1):
            e2 += [v | (s << 31) for v in vals]
    for x in [6.5, 8.0, 12.0, 100.0, 1e10, 0.125, 1e-3, 1e-30, 1e-40]:
        for b in f32_ulp_neighbors(x):
            e2 += [b, b | 0x80000000]
    sections.append(("e2m1_ties", e2))

    # 7. per-format denormal / out-of-range random values
    rng_vals = []
    ranges = [  # (lo, hi) exponent range for uniform-exponent random values
        (-133, -126),  # bf16 / f32 denormal range
        (-24, -14),  # f16 denormal range
        (-10, -6),  # e4m3 denormal range
        (-3, 0),  # e2m1 denormal range (0.5 is the only denormal)
        (8, 10),  # around e4m3 max
        (2, 5),  # around e2m1 max
        (15, 17),  # around f16 max
        (126, 128),  # around bf16 / f32 max
    ]
    for lo, hi in ranges:
        for _ in range(40):
            k = int(rng.integers(lo, hi))
            m = int(rng.integers(0, 1 << 23))
            s = int(rng.integers(0, 2))
            if k < -126:
                b = ((1 << 23) | m) >> (-126 - k)  # denormal f32
            else:
                b = ((k + 127) << 23) | m
            rng_vals.append(b | (s << 31))
    sections.append(("format_ranges", rng_vals))

    # 8. random, "log-uniform" over 2^-30 .. 2^20: uniform integer exponent in [-30, 19], uniform 23-bit
    #    mantissa, random sign. Built from integers only, so bit-identical on every machine.
    n_struct = sum(len(v) for _, v in sections)
    n_rand = N_INPUTS - n_struct
    assert n_rand > 2000, n_struct
    k = rng.integers(-30, 20, n_rand)
    m = rng.integers(0, 1 << 23, n_rand)
    s = rng.integers(0, 2, n_rand)
    rb = (((k + 127) << 23) | m | (s << 31)).astype(np.uint64)
    sections.append(("random_log_uniform", [int(v) for v in rb]))

    bits = []
    index = {}
    for name, v in sections:
        index[name] = [len(bits), len(bits) + len(v)]
        bits += v
    assert len(bits) == N_INPUTS
    return f32_from_bits(bits), index


# ----------------------------------------------------------------------------------------------------------------
# checks against independent implementations
# ----------------------------------------------------------------------------------------------------------------
def check_bf16(x_np, out_t):
    b = bits_of_f32(x_np).astype(np.uint64)
    nan = np.isnan(x_np)
    ref = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)  # integer RNE (overflow -> inf naturally)
    got = out_t.view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(got[~nan], ref[~nan]), "bf16: torch != integer RNE"
    assert np.all(np.isnan(out_t.float().numpy()[nan]))
    if HAVE_ML_DTYPES:
        m = x_np.astype(ml_dtypes.bfloat16).view(np.uint16)
        assert np.array_equal(got[~nan], m[~nan]), "bf16: torch != ml_dtypes"


def check_f16(x_np, out_t):
    nan = np.isnan(x_np)
    with np.errstate(all="ignore"):
        ref = x_np.astype(np.float16).view(np.uint16)
    got = out_t.view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(got[~nan], ref[~nan]), "f16: torch != numpy"
    assert np.all(np.isnan(out_t.float().numpy()[nan]))


def check_e4m3(x_np, out_t):
    if not HAVE_ML_DTYPES:
        return
    with np.errstate(all="ignore"):
        ref = x_np.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    got = out_t.view(torch.uint8).numpy()
    rnan = (ref & 0x7F) == 0x7F
    gnan = (got & 0x7F) == 0x7F
    assert np.array_equal(rnan, gnan), "e4m3: NaN positions differ between torch and ml_dtypes"
    assert np.array_equal(got[~gnan], ref[~rnan]), "e4m3: torch != ml_dtypes"


# ----------------------------------------------------------------------------------------------------------------
# fixture groups
# ----------------------------------------------------------------------------------------------------------------
def conversions(rng, T, meta):
    x_np, index = build_inputs(rng)
    x = torch_from_np(x_np.copy())
    T["f32_inputs"] = x
    meta["f32_inputs_sections"] = index

    bf = x.to(torch.bfloat16)
    check_bf16(x_np, bf)
    T["bf16_from_f32"] = canon_nan_bf16(bf)

    f16 = x.to(torch.float16)
    check_f16(x_np, f16)
    T["f16_from_f32"] = canon_nan_f16(f16)

    # torch: no saturation; |x| > 464 (incl. inf) -> NaN, NaN -> NaN (see module docstring)
    e4 = x.to(torch.float8_e4m3fn)
    check_e4m3(x_np, e4)
    T["e4m3_from_f32"] = canon_nan_e4m3(e4)

    xc = torch.where(torch.isnan(x), x, x.clamp(-448.0, 448.0))
    e4s = xc.to(torch.float8_e4m3fn)
    check_e4m3(xc.numpy(), e4s)
    u = e4s.view(torch.uint8)
    assert torch.equal((u & 0x7F) == 0x7F, torch.isnan(x)), "satfinite e4m3 must only be NaN for NaN inputs"
    T["e4m3_from_f32_satfinite"] = canon_nan_e4m3(e4s)

    c = e2m1_codes(x_np)
    cn = e2m1_codes_numpy(x_np)
    assert np.array_equal(c, cn), "e2m1: ml_dtypes != numpy reference"
    T["e2m1_codes_from_f32"] = torch_from_np(c)
    x6 = np.where(np.isnan(x_np), x_np, np.clip(x_np, -6.0, 6.0)).astype(np.float32)
    c6 = e2m1_codes(x6)
    assert np.array_equal(c6, e2m1_codes_numpy(x6))
    assert np.array_equal(c6[~np.isnan(x_np)], c[~np.isnan(x_np)]), "ml_dtypes e2m1 is expected to saturate"
    T["e2m1_codes_from_f32_satfinite"] = torch_from_np(c6)


def decode_tables(T):
    e4 = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    if HAVE_ML_DTYPES:
        ref = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
        assert np.array_equal(e4.numpy(), ref, equal_nan=True)
    assert torch.isnan(e4[0x7F]) and torch.isnan(e4[0xFF]) and int(torch.isnan(e4).sum()) == 2
    assert e4[0x7E].item() == 448.0 and e4[1].item() == 2.0 ** -9
    T["e4m3_all_f32"] = canon_nan_f32(e4)

    codes = np.arange(16, dtype=np.uint8)
    e2 = e2m1_decode(codes)
    assert np.array_equal(e2, e2m1_decode_bits(codes))
    assert np.array_equal(np.abs(e2[:8]), E2M1_VALUES.astype(np.float32))
    T["e2m1_all_f32"] = torch_from_np(e2)

    e8 = torch.arange(256, dtype=torch.uint8).view(torch.float8_e8m0fnu).float()
    ref8 = np.ldexp(np.float64(1.0), np.arange(256) - 127).astype(np.float32)
    assert np.array_equal(e8.numpy()[:255], ref8[:255]), "e8m0 decode != 2^(e-127)"
    assert torch.isnan(e8[255])
    T["e8m0_all_f32"] = canon_nan_f32(e8)

    allbits = np.arange(65536, dtype=np.uint32)
    bf = torch_from_np(allbits.astype(np.uint16).view(np.int16)).view(torch.bfloat16).float()
    assert np.array_equal(bf.numpy().view(np.uint32), allbits << 16), "bf16 decode is not a plain bit shift"
    T["bf16_all_f32"] = bf  # exact, NaN payloads included (bf16 -> f32 is a 16-bit shift)

    h = torch_from_np(allbits.astype(np.uint16).view(np.int16)).view(torch.float16).float()
    ref = allbits.astype(np.uint16).view(np.float16).astype(np.float32)
    assert np.array_equal(h.numpy(), ref, equal_nan=True)
    T["f16_all_f32"] = canon_nan_f32(h)


def random_e4m3_codes(rng, shape):
    c = rng.integers(0, 256, shape).astype(np.uint8)
    c = np.where((c & 0x7F) == 0x7F, c & 0xF0, c).astype(np.uint8)  # no NaN codes
    return torch_from_np(c).view(torch.float8_e4m3fn)


def random_pos_f32(rng, shape, lo_exp, hi_exp):
    k = rng.integers(lo_exp, hi_exp, shape)
    m = rng.integers(0, 1 << 23, shape)
    return f32_from_bits(((k + 127) << 23) | m).reshape(shape)


def block_expand(s, rows, cols, br, bc):
    return s.repeat_interleave(br, dim=0).repeat_interleave(bc, dim=1)[:rows, :cols]


def fp8_block_dequant(rng, T, prefix, rows, cols):
    w = random_e4m3_codes(rng, (rows, cols))
    sb = ((rows + 127) // 128, (cols + 127) // 128)
    sf = torch_from_np(random_pos_f32(rng, sb, -12, 4))
    se = torch_from_np(rng.integers(110, 141, sb).astype(np.uint8)).view(torch.float8_e8m0fnu)
    wf = w.float()
    d_f = wf * block_expand(sf, rows, cols, 128, 128)
    d_e = wf * block_expand(se.float(), rows, cols, 128, 128)
    # independent loop check for the e8m0 path (exact: e4m3 * 2^k)
    se_np = se.view(torch.uint8).numpy().astype(np.int64)
    ref = np.ldexp(wf.numpy().astype(np.float64), se_np[np.arange(rows)[:, None] // 128,
                                                         np.arange(cols)[None, :] // 128] - 127)
    assert np.array_equal(ref.astype(np.float32), d_e.numpy())
    sf_np = sf.numpy()
    ref_f = wf.numpy() * sf_np[np.arange(rows)[:, None] // 128, np.arange(cols)[None, :] // 128]
    assert np.array_equal(ref_f, d_f.numpy())
    d_e_bf = d_e.to(torch.bfloat16)
    assert torch.equal(d_e_bf.float(), d_e), "e4m3 * 2^k must be exact in bf16"
    T[f"{prefix}_weight"] = w
    T[f"{prefix}_scale_f32"] = sf
    T[f"{prefix}_scale_e8m0"] = se
    T[f"{prefix}_dequant_f32_scale"] = d_f
    T[f"{prefix}_dequant_e8m0_scale"] = d_e
    T[f"{prefix}_dequant_e8m0_scale_bf16"] = d_e_bf


def fp4_experts(rng, T):
    rows, cols = 64, 192
    codes = rng.integers(0, 16, (rows, cols)).astype(np.uint8)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)  # low nibble = element 2k
    scale = rng.integers(115, 136, (rows, cols // 32)).astype(np.uint8)
    # way 1: ml_dtypes (or bit decode) of the original codes
    v1 = e2m1_decode(codes).astype(np.float64)
    # way 2: unpack the packed bytes with torch bit ops, decode with the spec's table
    pk = torch_from_np(packed.view(np.int8)).view(torch.uint8).to(torch.int64)
    lo, hi = pk & 0xF, (pk >> 4) & 0xF
    unpacked = torch.stack([lo, hi], dim=-1).reshape(rows, cols)
    assert np.array_equal(unpacked.numpy(), codes)
    table = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], dtype=torch.float32)
    v2 = table[unpacked]
    assert np.array_equal(v1.astype(np.float32), v2.numpy())
    assert np.array_equal(np.signbit(v1), np.signbit(v2.numpy()))
    # torch's own float4 dtype only supports reinterpretation (no conversion kernels in 2.11); check the
    # byte layout round-trips through it.
    if hasattr(torch, "float4_e2m1fn_x2"):
        assert torch.equal(torch_from_np(packed).view(torch.float4_e2m1fn_x2).view(torch.uint8),
                           torch_from_np(packed))
    sc = torch_from_np(scale).view(torch.float8_e8m0fnu)
    d1 = np.ldexp(v1, np.repeat(scale.astype(np.int64) - 127, 32, axis=1)).astype(np.float32)
    d2 = v2 * sc.float().repeat_interleave(32, dim=1)
    assert np.array_equal(d1, d2.numpy())
    T["fp4w_packed"] = torch_from_np(packed.view(np.int8))
    T["fp4w_scale"] = sc
    T["fp4w_dequant_f32"] = d2


def act_quant_ref(x, block=128):
    """Spec §5.2 act_quant, exactly as the official kernel: per row, per 128 elements."""
    rows, cols = x.shape
    xb = x.view(rows, cols // block, block)
    amax = xb.abs().amax(dim=-1).clamp(min=1e-4)
    t = amax * torch.tensor(1.0 / 448.0, dtype=torch.float32)  # multiply by fp32(1/448)
    bits = t.view(torch.int32)
    k = ((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0).to(torch.int32)  # ceil(log2(t)) from the bits
    s = ((k + 127) << 23).to(torch.int32).view(torch.float32)  # 2^k
    q = (xb / s.unsqueeze(-1)).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(rows, cols)
    return q, s


def act_quant(rng, T):
    rows, cols = 8, 512
    x = np.zeros((rows, cols), np.float64)
    x[0] = rng.standard_normal(cols)
    x[1] = rng.standard_normal(cols) * 100.0
    x[2] = rng.standard_normal(cols) * 1e-6  # amax < 1e-4 -> clamped
    x[3] = 0.0  # all zeros
    x[4] = rng.standard_normal(cols)
    for b, k in enumerate([-3, 0, 2, -9]):  # amax exactly 448 * 2^k in every block
        blk = x[4, b * 128:(b + 1) * 128]
        blk *= (448.0 * 2.0 ** k * 0.99) / np.abs(blk).max()
        blk[int(rng.integers(0, 128))] = -448.0 * 2.0 ** k if b % 2 else 448.0 * 2.0 ** k
    x[5, :128] = rng.standard_normal(128) * 2e-5  # tiny block
    x[5, 128:256] = rng.standard_normal(128) * 1e3
    x[5, 256:384] = 0.0
    x[5, 384:] = rng.standard_normal(128) * 1e-2
    for b in range(4):  # amax just above / below 448 * 2^k (bf16 neighbours)
        blk = rng.standard_normal(128) * 0.1
        blk[5] = 448.0 * 2.0 ** (b - 2) * (1 + 2.0 ** -7 if b % 2 else 1 - 2.0 ** -8)
        x[6, b * 128:(b + 1) * 128] = blk
    x[7] = rng.standard_normal(cols) * np.exp2(rng.uniform(-12, 6, cols))  # wide dynamic range
    xt = torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16).float()  # bf16-representable values
    q, s = act_quant_ref(xt)
    # cross-check the scale with an independent f64 formulation: smallest 2^k >= amax*fp32(1/448)
    amax = np.maximum(np.abs(xt.numpy().reshape(rows, 4, 128)).max(-1), np.float32(1e-4)).astype(np.float32)
    t = (amax * np.float32(1.0 / 448.0)).astype(np.float32)
    k = np.ceil(np.log2(t.astype(np.float64)))
    assert np.array_equal(np.ldexp(1.0, k.astype(np.int64)).astype(np.float32), s.numpy())
    if HAVE_ML_DTYPES:
        y = np.clip(xt.numpy().reshape(rows, 4, 128) / s.numpy()[..., None], -448, 448).astype(np.float32)
        qr = y.astype(ml_dtypes.float8_e4m3fn).view(np.uint8).reshape(rows, cols)
        assert np.array_equal(qr, q.view(torch.uint8).numpy())
    T["actq_x"] = xt
    T["actq_q"] = q
    T["actq_scale"] = s


def build_all():
    rng = np.random.Generator(np.random.PCG64(SEED))
    T, meta = {}, {}
    conversions(rng, T, meta)
    decode_tables(T)
    fp8_block_dequant(rng, T, "fp8w", 300, 200)
    fp8_block_dequant(rng, T, "fp8w2", 256, 384)
    fp4_experts(rng, T)
    act_quant(rng, T)
    return T, meta


def content_hash(T):
    h = hashlib.sha256()
    for k in sorted(T):
        t = T[k].contiguous()
        h.update(k.encode())
        h.update(str(t.dtype).encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.element_size() == 1 else
                 t.view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    with np.errstate(all="ignore"):  # NaN/inf casts are intended
        T, info = build_all()
        # determinism: build twice, compare
        T2, _ = build_all()
    assert content_hash(T) == content_hash(T2)
    digest = content_hash(T)
    versions = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "numpy": np.__version__,
        "ml_dtypes": ml_dtypes.__version__ if HAVE_ML_DTYPES else "absent (numpy fallback)",
    }
    # a single metadata key: safetensors writes metadata keys in hash order, one key keeps the bytes stable
    meta = {"provenance": json.dumps({
        "generator": "tools/reference/make_format_fixtures.py",
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "seed": SEED,
        "versions": versions,
        "device": "cpu",
        "content_sha256": digest,
        "f32_inputs_sections": info["f32_inputs_sections"],
        "nan_policy": "NaN outputs canonicalized: bf16 0x7FC0, f16 0x7E00, e4m3 0x7F, f32 0x7FC00000 "
                      "(bf16_all_f32 keeps exact payloads); compare NaN as NaN",
    })}
    path = os.path.join(args.out, "formats.safetensors")
    save_file({k: v.contiguous() for k, v in T.items()}, path, metadata=meta)
    print(f"wrote {path} ({os.path.getsize(path)} bytes), content sha256 {digest}")
    for k in sorted(T):
        print(f"  {k:36s} {str(T[k].dtype):24s} {list(T[k].shape)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
