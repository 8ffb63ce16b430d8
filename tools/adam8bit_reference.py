#!/usr/bin/env python3
"""An independent reference of docs/quantization.md's "8-bit Adam states" in numpy: writes the
fixtures of kernels/cpu/testdata/adam8bit/, which //kernels/cpu:adam8bit_fixture_test compares
with the C++ step (codes and absmaxes exactly, the master bit for bit), and
//tools:adam8bit_reference_test regenerates and compares with the committed copy byte for byte.

Written from the specification, not from the C++: every step is a whole-array numpy operation
on float32 arrays with float32 scalars (each product, sum, quotient and square root rounded
once; numpy never fuses them into an FMA). The maps and the input generator are
tools/quant_reference.py's (the numpy reference of the same page).

Usage: tools/adam8bit_reference.py OUT_DIR

The case: n = 2 * 2048 + 300 elements, three blocks: block 0 random moments and gradients,
block 1 all zero (moments and gradients), block 2 a tail of 300 at a scale 1e-4 of block 0's.
Three AdamW steps (step = 1, 2, 3) with the hyper-parameters of hyper.txt.

Files written (little-endian):
  hyper.txt                "n lr beta1 beta2 eps weight_decay grad_scale", the floats as
                           Python float.hex() of their fp32 values
  initial.master.f32       the master before step 1 (n fp32)
  initial.m_codes.u8, initial.m_absmax.f32, initial.v_codes.u8, initial.v_absmax.f32
                           the moments before step 1: random fp32 moments encoded by the
                           page's rule (codes n bytes, absmaxes one fp32 per block)
  stepK.grad.bf16          the gradient of step K (bf16, widened exactly to fp32; K = 1..3)
  stepK.master.f32, stepK.m_codes.u8, stepK.m_absmax.f32, stepK.v_codes.u8,
  stepK.v_absmax.f32       the state after step K
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quant_reference import SIGNED_MAP, UNSIGNED_MAP, SplitMix64  # noqa: E402

BLOCK = 2048
MIN_ABSMAX = np.float32(2.0**-120)
F32 = np.float32


def decision_points(table):
    """d_i = fp32((double(v_i) + double(v_{i+1})) / 2)."""
    t = table.astype(np.float64)
    return ((t[:-1] + t[1:]) / 2).astype(np.float32)


SIGNED_POINTS = decision_points(SIGNED_MAP)
UNSIGNED_POINTS = decision_points(UNSIGNED_MAP)


def encode_block(x, signed):
    """The page's encoding of one block's fp32 moments: (codes, stored absmax)."""
    points = SIGNED_POINTS if signed else UNSIGNED_POINTS
    absmax = np.max(np.abs(x)) if x.size else F32(0)
    if absmax < MIN_ABSMAX:
        absmax = F32(0)
        y = np.zeros_like(x)
    else:
        y = x * (F32(1) / absmax)  # one fp32 reciprocal, then fp32 products
    # The code is the number of decision points strictly below y.
    codes = np.searchsorted(points, y, side="left").astype(np.uint8)
    return codes, F32(absmax)


def encode(x, signed):
    codes = np.zeros(x.size, dtype=np.uint8)
    absmax = np.zeros((x.size + BLOCK - 1) // BLOCK, dtype=np.float32)
    for b in range(absmax.size):
        codes[b * BLOCK:(b + 1) * BLOCK], absmax[b] = encode_block(x[b * BLOCK:(b + 1) * BLOCK],
                                                                   signed)
    return codes, absmax


def decode(codes, absmax, signed):
    table = SIGNED_MAP if signed else UNSIGNED_MAP
    scale = np.repeat(absmax, BLOCK)[:codes.size]
    return table[codes] * scale  # one fp32 product


def adam8bit_step(master, grad, m_codes, m_absmax, v_codes, v_absmax, hp, step):
    """One step as the page says; returns the new (master, m_codes, m_absmax, v_codes,
    v_absmax)."""
    lr, beta1, beta2, eps, weight_decay, grad_scale = (F32(hp[k]) for k in (
        "lr", "beta1", "beta2", "eps", "weight_decay", "grad_scale"))
    # Bias corrections in double, rounded once; 1 - beta in fp32.
    c1 = F32(1.0 - float(beta1)**step)
    c2 = F32(1.0 - float(beta2)**step)
    one_minus_beta1 = F32(1) - beta1
    one_minus_beta2 = F32(1) - beta2
    m = decode(m_codes, m_absmax, True)
    v = decode(v_codes, v_absmax, False)
    g = grad * grad_scale
    m = beta1 * m + one_minus_beta1 * g
    v = beta2 * v + (one_minus_beta2 * g) * g
    m_hat = m / c1
    v_hat = v / c2
    master = master - lr * (m_hat / (np.sqrt(v_hat) + eps) + weight_decay * master)
    m_codes, m_absmax = encode(m, True)
    v_codes, v_absmax = encode(v, False)
    return master, m_codes, m_absmax, v_codes, v_absmax


def to_bf16(x):
    """fp32 -> bf16 bits, round to nearest even (the inputs are finite)."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def from_bf16(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


HYPER = {"lr": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.1,
         "grad_scale": 0.5}
N = 2 * BLOCK + 300


def uniform(rng, n, low, high):
    return np.array([low + (high - low) * rng.uniform() for _ in range(n)],
                    dtype=np.float64).astype(np.float32)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: adam8bit_reference.py OUT_DIR")
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)

    def write(name, data):
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(np.ascontiguousarray(data).tobytes())

    rng = SplitMix64(38)
    # Per block: the scale of the moments and gradients (block 1 is all zero).
    scales = np.repeat(np.array([1.0, 0.0, 1e-4], dtype=np.float32), BLOCK)[:N]
    master = uniform(rng, N, -1, 1)
    m = uniform(rng, N, -1e-2, 1e-2) * scales
    v = uniform(rng, N, 0, 1e-4) * (scales * scales)
    grads = [from_bf16(to_bf16(uniform(rng, N, -0.1, 0.1) * scales)) for _ in range(3)]
    m_codes, m_absmax = encode(m, True)
    v_codes, v_absmax = encode(v, False)

    with open(os.path.join(out_dir, "hyper.txt"), "w") as f:
        f.write("%d %s\n" % (N, " ".join(float(F32(HYPER[k])).hex() for k in (
            "lr", "beta1", "beta2", "eps", "weight_decay", "grad_scale"))))
    write("initial.master.f32", master.astype("<f4"))
    write("initial.m_codes.u8", m_codes)
    write("initial.m_absmax.f32", m_absmax.astype("<f4"))
    write("initial.v_codes.u8", v_codes)
    write("initial.v_absmax.f32", v_absmax.astype("<f4"))
    for step in (1, 2, 3):
        grad = grads[step - 1]
        write("step%d.grad.bf16" % step, to_bf16(grad).astype("<u2"))
        master, m_codes, m_absmax, v_codes, v_absmax = adam8bit_step(
            master, grad, m_codes, m_absmax, v_codes, v_absmax, HYPER, step)
        assert master.dtype == np.float32 and m_absmax.dtype == np.float32
        assert m_absmax[1] == 0 and v_absmax[1] == 0  # the zero block stays zero
        write("step%d.master.f32" % step, master.astype("<f4"))
        write("step%d.m_codes.u8" % step, m_codes)
        write("step%d.m_absmax.f32" % step, m_absmax.astype("<f4"))
        write("step%d.v_codes.u8" % step, v_codes)
        write("step%d.v_absmax.f32" % step, v_absmax.astype("<f4"))


if __name__ == "__main__":
    main()
