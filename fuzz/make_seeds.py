#!/usr/bin/env python3
"""Writes the synthetic seeds of fuzz/'s corpora (docs/fuzzing.md says where the others
come from): small valid files of each binary format and near misses of them, so that the
fuzzer starts past the first checks. Deterministic: running it again writes the same bytes.

  fuzz/make_seeds.py            # from the repository root; overwrites these seeds only

safetensors_header  one file each of F32, BF16 and F16 tensors, metadata, a scalar and an
                    empty tensor, a header padded with spaces, GPT-2-like names; near misses:
                    a gap, an overlap, trailing bytes, a length past the file
safetensors_index   indexes of the three shards fuzz/safetensors_index_fuzz.cc writes
                    (tensors a | b c | d), right and wrong
llmc_header         llm.c GPT-2 checkpoints of tiny shapes, header and every parameter
                    (sizes: 1024 + 4 * params bytes); version 5 (bf16) and a token magic
token_file          llm.c GPT-2 and Llama 3 token files, strata's 2- and 4-byte files with a
                    vocabulary, text, a near miss of a magic, an llm.c model's magic
tokenizer_json      byte-level BPE tokenizer.json documents of 256 bytes and a few merges
                    (the shape of data/tokenizer/tokenizer_testing.cc's TinyTokenizerJson):
                    GPT-2's ByteLevel regex, Llama 3's Split + ByteLevel with ignore_merges,
                    Qwen's NFC normalizer, added tokens, merges as pairs; an unsupported one
"""
import json
import os
import struct

ROOT = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    path = os.path.join(ROOT, target, "corpus", name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(path, "wb") as out:
        out.write(data)


# --- safetensors -------------------------------------------------------------------------

def f32(values):
    return struct.pack("<%df" % len(values), *values)


def bf16(values):
    return b"".join(struct.pack("<f", v)[2:] for v in values)


def f16(values):
    return struct.pack("<%de" % len(values), *values)


def safetensors(tensors, metadata=None, pad_to=8, header_extra=b""):
    """tensors: (name, dtype, shape, bytes) in data order."""
    header = {}
    offset = 0
    data = b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        data += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode() + header_extra
    text += b" " * ((-len(text)) % pad_to)
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds():
    ramp = [0.5 * i - 1.0 for i in range(12)]
    write("safetensors_header", "f32_bf16_f16",
          safetensors([("a", "F32", [2, 3], f32(ramp[:6])),
                       ("b", "BF16", [4], bf16(ramp[:4])),
                       ("c", "F16", [2, 2], f16(ramp[:4]))], {"format": "pt"}))
    write("safetensors_header", "scalar_and_empty",
          safetensors([("scalar", "F32", [], f32([3.0])),
                       ("empty", "F32", [0, 4], b"")]))
    write("safetensors_header", "gpt2_names",
          safetensors([("transformer.wte.weight", "F32", [4, 2], f32(ramp[:8])),
                       ("transformer.h.0.attn.c_attn.weight", "BF16", [2, 6], bf16(ramp)),
                       ("transformer.ln_f.bias", "F32", [2], f32([0.0, 1.0]))],
                      {"format": "pt", "total": "3"}, pad_to=64))
    write("safetensors_header", "no_tensors", safetensors([], {"format": "pt"}))
    good = safetensors([("a", "F32", [2], f32([1.0, 2.0])), ("b", "F32", [1], f32([3.0]))])
    write("safetensors_header", "trailing_byte", good + b"\0")
    write("safetensors_header", "truncated", good[:-2])
    gap = {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
           "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}}
    text = json.dumps(gap).encode()
    write("safetensors_header", "gap", struct.pack("<Q", len(text)) + text + b"\0" * 12)
    overlap = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
               "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}
    text = json.dumps(overlap).encode()
    write("safetensors_header", "overlap", struct.pack("<Q", len(text)) + text + b"\0" * 8)
    write("safetensors_header", "length_past_end", struct.pack("<Q", 1 << 40) + b"{}")

    # The fuzz target's shards: a [4, 4] | b [8], c [2, 3] | d [3] (64 bytes of data each at
    # most); the index maps each tensor to its shard.
    shards = ["model-0000%d-of-00003.safetensors" % k for k in (1, 2, 3)]
    right = {"a": shards[0], "b": shards[1], "c": shards[1], "d": shards[2]}
    index = lambda weight_map, metadata={"total_size": 136}: json.dumps(
        {"metadata": metadata, "weight_map": weight_map}, indent=2)
    write("safetensors_index", "right", index(right))
    write("safetensors_index", "no_metadata", json.dumps({"weight_map": right}))
    write("safetensors_index", "wrong_shard", index(dict(right, c=shards[2])))
    write("safetensors_index", "missing_tensor", index({k: v for k, v in right.items() if k != "d"}))
    write("safetensors_index", "extra_tensor", index(dict(right, e=shards[0])))
    write("safetensors_index", "outside", index(dict(right, a="../" + shards[0])))
    write("safetensors_index", "absent_shard",
          index(dict(right, d="model-00004-of-00004.safetensors")))


# --- llm.c model headers --------------------------------------------------------------------

LLMC_MODEL_MAGIC = 20240326


def llmc_model(max_seq_len, vocab, layers, heads, channels, padded_vocab, version=3,
               magic=LLMC_MODEL_MAGIC, extra_params=0):
    header = [0] * 256
    header[:8] = [magic, version, max_seq_len, vocab, layers, heads, channels, padded_vocab]
    c = channels
    params = (padded_vocab + max_seq_len) * c + layers * (12 * c * c + 13 * c) + 2 * c
    params += extra_params
    return struct.pack("<256i", *header) + f32([0.01 * (i % 7) for i in range(params)])


def llmc_seeds():
    write("llmc_header", "tiny", llmc_model(4, 8, 1, 1, 4, 8))
    write("llmc_header", "padded_vocab", llmc_model(8, 10, 2, 2, 4, 16))
    write("llmc_header", "one_param_short", llmc_model(4, 8, 1, 1, 4, 8, extra_params=-1))
    write("llmc_header", "bf16_version", llmc_model(4, 8, 1, 1, 4, 8, version=5))
    write("llmc_header", "token_file_magic", llmc_model(4, 8, 1, 1, 4, 8, magic=20240520))
    write("llmc_header", "header_only", struct.pack("<256i", LLMC_MODEL_MAGIC, 3, *([0] * 254)))


# --- token files ----------------------------------------------------------------------------

def token_header(magic, version, count, width=0, vocab=0):
    header = [0] * 256
    header[:5] = [magic, version, count, width, vocab]
    return struct.pack("<256i", *header)


def token_seeds():
    ids = [(i * 7919) % 50257 for i in range(64)]
    write("token_file", "llmc_gpt2",
          token_header(20240520, 1, len(ids)) + struct.pack("<%dH" % len(ids), *ids))
    wide = [(i * 104729) % 128256 for i in range(32)]
    write("token_file", "llmc_llama3",
          token_header(20240801, 7, len(wide)) + struct.pack("<%dI" % len(wide), *wide))
    write("token_file", "strata_2byte",
          token_header(20261201, 1, len(ids), 2, 50257) + struct.pack("<%dH" % len(ids), *ids))
    write("token_file", "strata_4byte",
          token_header(20261201, 1, len(wide), 4, 0) + struct.pack("<%dI" % len(wide), *wide))
    write("token_file", "near_miss_magic",
          token_header(20240521, 1, len(ids)) + struct.pack("<%dH" % len(ids), *ids))
    write("token_file", "model_magic", token_header(LLMC_MODEL_MAGIC, 3, 4) + b"\0" * 64)
    write("token_file", "text",
          "It is a truth universally acknowledged, that a single man in possession of a good "
          "fortune, must be in want of a wife.\n\u00e9t\u00e9 \u65e5\u672c\n")


# --- tokenizer.json ---------------------------------------------------------------------------

def byte_to_unicode():
    """GPT-2's bytes_to_unicode."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1))
                 + list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    table = {}
    extra = 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def tokenizer_json(merges, pairs=False):
    table = byte_to_unicode()
    level = lambda text: "".join(table[b] for b in text.encode())
    vocab = {table[b]: b for b in range(256)}
    merge_list = []
    for left, right in merges:
        vocab[level(left + right)] = len(vocab)
        merge_list.append([level(left), level(right)] if pairs else level(left) + " " + level(right))
    return {
        "version": "1.0",
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": vocab, "merges": merge_list},
    }


def tokenizer_seeds():
    hello = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), (" ", "w"), ("o", "r"),
             (" w", "or"), ("a", "a")]
    dump = lambda document: json.dumps(document, ensure_ascii=False, indent=1)
    write("tokenizer_json", "gpt2_style", dump(tokenizer_json(hello)))
    write("tokenizer_json", "merges_as_pairs", dump(tokenizer_json(hello, pairs=True)))
    llama3 = tokenizer_json([("3", "4"), ("1", "2"), ("12", "3"), ("4", "5")])
    llama3["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated",
         "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
         "use_regex": False}]}
    llama3["model"]["ignore_merges"] = True
    llama3["added_tokens"] = [
        {"id": 300, "content": "<|begin_of_text|>", "special": True, "normalized": False,
         "lstrip": False, "rstrip": False, "single_word": False},
        {"id": 301, "content": "<|end|>", "special": True, "normalized": False}]
    write("tokenizer_json", "llama3_style", dump(llama3))
    qwen = tokenizer_json(hello)
    qwen["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFC"}]}
    qwen["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"String": " "}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": True, "use_regex": False}]}
    qwen["added_tokens"] = [{"id": 400, "content": "hello wo", "special": False,
                             "normalized": True}]
    write("tokenizer_json", "qwen_style_nfc", dump(qwen))
    unsupported = tokenizer_json(hello[:2])
    unsupported["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581"}
    write("tokenizer_json", "metaspace", dump(unsupported))


if __name__ == "__main__":
    safetensors_seeds()
    llmc_seeds()
    token_seeds()
    tokenizer_seeds()
