#!/usr/bin/env python3
"""An independent reference of docs/quantization.md in numpy: writes the fixtures of
kernels/cpu/testdata/quant/, which //kernels/cpu:quantize_fixture_test compares with the C++
encoding and decoding bit for bit, and //tools:quant_reference_test regenerates and compares
with the committed copy byte for byte (so they cannot go stale).

Written from the specification, not from the C++: every step is a whole-array numpy
operation in the dtype the document names (fp32 products and sums are numpy float32
operations, each rounded once; numpy never fuses them into an FMA).

Usage: tools/quant_reference.py OUT_DIR

Files written (all little-endian):
  maps.f32                 the signed dynamic map (256), the unsigned one (256), the NF4 values
                           (16), as fp32
  cases.txt                one line per case: NAME N FORMATS (a comma-separated list)
  NAME.input.f32           the case's n input values
  NAME.FORMAT.piece        the piece in FORMAT (nf4, int8, bf16), laid out as PieceLayout
  NAME.FORMAT.f32          its n dequantized values (omitted for the large case: its nf4
                           piece alone, to keep the fixtures small)
"""

import os
import sys

import numpy as np

BLOCK = 64
GROUP = 256
ALIGN = 16
MIN_ABSMAX = np.float32(2.0**-120)

NF4 = np.array([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
], dtype=np.float32)


def dynamic_map(signed):
    """Decades i = 0..6; k - 1 = 2^i (signed) or 2^(i+1) (unsigned) intervals of [0.1, 1];
    each interval's midpoint times 10^(i-6) is (2(k-1) + 9(2j+1)) / (20 (k-1) 10^(6-i)),
    one double division of exact integers, then rounded to fp32; negated copies when signed;
    then 0 and 1; sorted."""
    values = []
    for i in range(7):
        intervals = 2**i if signed else 2**(i + 1)
        j = np.arange(intervals, dtype=np.int64)
        numerator = (2 * intervals + 9 * (2 * j + 1)).astype(np.float64)
        denominator = np.float64(20 * intervals * 10**(6 - i))
        v = (numerator / denominator).astype(np.float32)
        values.append(v)
        if signed:
            values.append(-v)
    values.append(np.array([0.0, 1.0], dtype=np.float32))
    out = np.sort(np.concatenate(values))
    assert out.size == 256 and np.all(np.diff(out) > 0)
    return out


SIGNED_MAP = dynamic_map(True)
UNSIGNED_MAP = dynamic_map(False)


def midpoints(values):
    return ((values[:-1].astype(np.float64) + values[1:].astype(np.float64)) / 2).astype(
        np.float32)


def encode_with(y, table_midpoints):
    """The code of each y: how many decision points are strictly below it."""
    return (y[..., None] > table_midpoints).sum(axis=-1)


def align(nbytes):
    return (nbytes + ALIGN - 1) // ALIGN * ALIGN


def layout(fmt, n):
    """Each array's (offset, size) in bytes and the piece's total, in the spec's order."""
    blocks = -(-n // BLOCK)
    if fmt == "bf16":
        sizes = [("codes", 2 * n)]
    elif fmt == "int8":
        sizes = [("codes", blocks * BLOCK), ("absmax", 4 * blocks)]
    else:
        groups = -(-blocks // GROUP)
        sizes = [("codes", blocks * BLOCK // 2), ("absmax", blocks), ("absmax2", 4 * groups),
                 ("offset", 4)]
    arrays, at = {}, 0
    for name, size in sizes:
        arrays[name] = (at, size)
        at += align(size)
    return arrays, at


def blocks_of(x):
    """x padded with zeros to whole blocks, one block per row."""
    blocks = -(-x.size // BLOCK)
    padded = np.zeros(blocks * BLOCK, dtype=np.float32)
    padded[:x.size] = x
    return padded.reshape(blocks, BLOCK)


def block_absmax(x):
    a = np.abs(blocks_of(x)).max(axis=1).astype(np.float32)
    a[a < MIN_ABSMAX] = 0
    return a


def safe_reciprocal(numerator, a):
    """numerator / a in fp32 where a != 0 (else 0: the zero blocks do not use it)."""
    out = np.zeros_like(a)
    nonzero = a != 0
    out[nonzero] = np.float32(numerator) / a[nonzero]
    return out


def quantize_nf4(x):
    absmax = block_absmax(x)
    y = blocks_of(x) * safe_reciprocal(1.0, absmax)[:, None]
    codes = encode_with(y, midpoints(NF4)).astype(np.uint8)
    codes[absmax == 0, :] = 7
    packed = (codes[:, 0::2] << 4) | codes[:, 1::2]
    # Double quantization: the mean, summed in double in block order.
    total = 0.0
    for a in absmax.tolist():
        total += a
    offset = np.float32(total / absmax.size)
    centred = absmax - offset  # fp32
    groups = -(-absmax.size // GROUP)
    absmax2 = np.zeros(groups, dtype=np.float32)
    absmax_codes = np.zeros(absmax.size, dtype=np.uint8)
    for g in range(groups):
        c = centred[g * GROUP:(g + 1) * GROUP]
        m = np.abs(c).max()
        if m < MIN_ABSMAX:
            m = np.float32(0)
        absmax2[g] = m
        if m == 0:
            absmax_codes[g * GROUP:(g + 1) * GROUP] = 127
        else:
            y2 = c * (np.float32(1) / m)
            absmax_codes[g * GROUP:(g + 1) * GROUP] = encode_with(y2, midpoints(SIGNED_MAP))
    arrays, total_bytes = layout("nf4", x.size)
    piece = np.zeros(total_bytes, dtype=np.uint8)
    put(piece, arrays["codes"], packed.reshape(-1))
    put(piece, arrays["absmax"], absmax_codes)
    put(piece, arrays["absmax2"], absmax2.view(np.uint8))
    put(piece, arrays["offset"], np.array([offset], dtype=np.float32).view(np.uint8))
    return piece


def dequantize_nf4(piece, n):
    arrays, _ = layout("nf4", n)
    packed = get(piece, arrays["codes"])
    codes = np.empty(packed.size * 2, dtype=np.uint8)
    codes[0::2] = packed >> 4
    codes[1::2] = packed & 15
    absmax_codes = get(piece, arrays["absmax"])
    absmax2 = get(piece, arrays["absmax2"]).view(np.float32)
    offset = get(piece, arrays["offset"]).view(np.float32)[0]
    block = np.arange(absmax_codes.size)
    scale = SIGNED_MAP[absmax_codes] * absmax2[block // GROUP] + offset  # two fp32 roundings
    values = NF4[codes].reshape(-1, BLOCK) * scale[:, None]
    return values.reshape(-1)[:n]


def quantize_int8(x):
    absmax = block_absmax(x)
    scaled = blocks_of(x) * safe_reciprocal(127.0, absmax)[:, None]
    codes = np.clip(np.rint(scaled), -127, 127).astype(np.int8)  # rint: half to even
    arrays, total_bytes = layout("int8", x.size)
    piece = np.zeros(total_bytes, dtype=np.uint8)
    put(piece, arrays["codes"], codes.reshape(-1).view(np.uint8))
    put(piece, arrays["absmax"], absmax.view(np.uint8))
    return piece


def dequantize_int8(piece, n):
    arrays, _ = layout("int8", n)
    codes = get(piece, arrays["codes"]).view(np.int8).astype(np.float32).reshape(-1, BLOCK)
    absmax = get(piece, arrays["absmax"]).view(np.float32)
    return (codes * (absmax / np.float32(127))[:, None]).reshape(-1)[:n]


def quantize_bf16(x):
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    arrays, total_bytes = layout("bf16", x.size)
    piece = np.zeros(total_bytes, dtype=np.uint8)
    put(piece, arrays["codes"], rounded.view(np.uint8))
    return piece


def dequantize_bf16(piece, n):
    arrays, _ = layout("bf16", n)
    bits = get(piece, arrays["codes"]).view(np.uint16).astype(np.uint32) << 16
    return bits.view(np.float32)


def put(piece, where, data):
    offset, size = where
    assert data.size == size
    piece[offset:offset + size] = data


def get(piece, where):
    offset, size = where
    return piece[offset:offset + size].copy()


FORMATS = {
    "nf4": (quantize_nf4, dequantize_nf4),
    "int8": (quantize_int8, dequantize_int8),
    "bf16": (quantize_bf16, dequantize_bf16),
}


class SplitMix64:
    """A generator defined here (splitmix64), so the inputs do not depend on numpy's."""

    def __init__(self, seed):
        self.state = seed

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        return z ^ (z >> 31)

    def uniform(self):  # [0, 1), 53 bits
        return (self.next() >> 11) * 2.0**-53


def case_values(n, seed):
    """n values, block by block of varied kinds: random at scales 1e-6..1e6 (some 1e30),
    all zeros, all below the flush threshold, NF4 ties (1.0 then decision points), int8
    ties (127 then halves)."""
    rng = SplitMix64(seed)
    nf4_midpoints = midpoints(NF4)
    x = np.zeros(n, dtype=np.float32)
    for begin in range(0, n, BLOCK):
        end = min(n, begin + BLOCK)
        kind = rng.next() % 10
        if kind == 0:
            continue
        if kind == 1:
            values = [(rng.uniform() * 2 - 1) * 1e-38 for _ in range(begin, end)]
        elif kind == 2:
            values = [1.0] + [float(nf4_midpoints[rng.next() % 15]) * (1 if rng.next() % 2 else -1)
                              for _ in range(begin + 1, end)]
        elif kind == 3:
            values = [127.0] + [float(int(rng.next() % 253) - 126) + 0.5
                                for _ in range(begin + 1, end)]
        else:
            scale = 1e30 if kind == 4 else 10.0**(int(rng.next() % 13) - 6)
            values = [(rng.uniform() * 2 - 1) * scale for _ in range(begin, end)]
        x[begin:end] = np.array(values[:end - begin], dtype=np.float64).astype(np.float32)
    return x


# name, n, seed, formats with their dequantized values, formats with the piece alone
CASES = [
    ("one_block", 64, 1, ["nf4", "int8", "bf16"], []),
    ("padded", 100, 2, ["nf4", "int8", "bf16"], []),
    ("blocks65", 4096 + 17, 3, ["nf4", "int8", "bf16"], []),
    # Two absmax groups (257 blocks): the nf4 piece alone.
    ("groups2", 257 * BLOCK, 4, [], ["nf4"]),
]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: quant_reference.py OUT_DIR")
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)

    def write(name, data):
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(np.ascontiguousarray(data).tobytes())

    write("maps.f32", np.concatenate([SIGNED_MAP, UNSIGNED_MAP, NF4]).astype("<f4"))
    lines = []
    for name, n, seed, full, piece_only in CASES:
        x = case_values(n, seed)
        write(name + ".input.f32", x.astype("<f4"))
        for fmt in full + piece_only:
            quantize, dequantize = FORMATS[fmt]
            piece = quantize(x)
            write(name + "." + fmt + ".piece", piece)
            if fmt in full:
                write(name + "." + fmt + ".f32", dequantize(piece, n).astype("<f4"))
        lines.append("%s %d %s %s\n" % (name, n, ",".join(full) or "-",
                                        ",".join(piece_only) or "-"))
    with open(os.path.join(out_dir, "cases.txt"), "w") as f:
        f.writelines(lines)


if __name__ == "__main__":
    main()
