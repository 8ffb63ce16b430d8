#!/usr/bin/env python3
"""Independent reference outputs for strata's import of Hugging Face models.

Builds tiny random models whose forward follows Hugging Face transformers' modeling
code (GPT2LMHeadModel, LlamaForCausalLM) as written here from that code's semantics,
without transformers or safetensors installed, and writes per model a directory in
the layout `save_pretrained` produces (config.json, model.safetensors) plus
reference.safetensors: the fixed batch, the logits, the loss and the gradient of the
loss with respect to every parameter. strata's importer must reproduce these.

Invariants:
  * The saved F32 weights are exactly the values the reference computed with: each
    parameter is drawn in float32, saved as is, and cast to float64 for the forward and
    backward; outputs are rounded to float32 only when written.
  * Loss = mean over all B*T positions of cross_entropy(logits[b, t], targets[b, t]),
    targets given explicitly (no label shift), as strata takes them. Dropout is off.
  * Output is deterministic: fixed seeds, one CPU thread, tensors written in sorted
    name order. Running twice gives byte-identical files.
Single-threaded script; no thread-safety concerns.

Usage: /usr/bin/python3 tools/hf_reference.py --out tests/testdata/hf
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

BATCH = 2
SEQ_LEN = 16  # the full context of every model below
MATRIX_STD = 0.2  # large enough that attention is far from uniform
# The brief asked for ~300 KB; the model shapes it fixes need ~590 KB (weights and
# their gradients are both stored in F32), Qwen2's ~130 KB more and the small Mistral's and
# Qwen3's ~80 KB each, so the check guards against growth instead.
SIZE_BUDGET_BYTES = 1000 * 1024

GPT2_CONFIG = {
    "activation_function": "gelu_new",
    "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1,
    # GPT-2's default 50256 lies outside this vocabulary; the last id is used instead.
    "bos_token_id": 95,
    "embd_pdrop": 0.1,
    "eos_token_id": 95,
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05,
    "model_type": "gpt2",
    "n_ctx": 16,
    "n_embd": 32,
    "n_head": 2,
    "n_inner": None,
    "n_layer": 2,
    "n_positions": 16,
    "reorder_and_upcast_attn": False,
    "resid_pdrop": 0.1,
    "scale_attn_by_inverse_layer_idx": False,
    "scale_attn_weights": True,
    "summary_activation": None,
    "summary_first_dropout": 0.1,
    "summary_proj_to_labels": True,
    "summary_type": "cls_index",
    "summary_use_proj": True,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
    "use_cache": True,
    "vocab_size": 96,
}

LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "head_dim": 8,
    "hidden_act": "silu",
    "hidden_size": 32,
    "initializer_range": 0.02,
    "intermediate_size": 48,
    "max_position_embeddings": 16,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "use_cache": True,
    "vocab_size": 100,
}

# Tied like Llama 3.2 1B, with its "llama3" rope scaling; an original context of 128 puts
# the 4 frequency pairs of head_dim 8 in all three of its bands (kept, mixed, divided).
LLAMA_TIED_CONFIG = dict(
    LLAMA_CONFIG,
    tie_word_embeddings=True,
    num_key_value_heads=1,
    max_position_embeddings=512,
    rope_scaling={
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 128,
        "rope_type": "llama3",
    },
)

# Qwen2 (Qwen2ForCausalLM): LLaMA's shape with biases on q_proj, k_proj and v_proj (not on
# o_proj; no config field says so), no head_dim key, tied like the small Qwen2.5 models.
QWEN2_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 98,
    "eos_token_id": 99,
    "hidden_act": "silu",
    "hidden_size": 32,
    "initializer_range": 0.02,
    "intermediate_size": 48,
    "max_position_embeddings": 16,
    "max_window_layers": 2,
    "model_type": "qwen2",
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "sliding_window": 16,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 100,
}

# Mistral (MistralForCausalLM) as Mistral Nemo shapes it: head_dim set apart from
# hidden_size / num_attention_heads (here 16 against 16 / 2 = 8, so q_proj is [32, 16] and
# o_proj [16, 32]), no sliding window, untied. Small, for the fixtures' size budget.
MISTRAL_CONFIG = {
    "architectures": ["MistralForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "head_dim": 16,
    "hidden_act": "silu",
    "hidden_size": 16,
    "initializer_range": 0.02,
    "intermediate_size": 32,
    "max_position_embeddings": 16,
    "model_type": "mistral",
    "num_attention_heads": 2,
    "num_hidden_layers": 2,
    "num_key_value_heads": 1,
    "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "use_cache": True,
    "vocab_size": 64,
}

# Qwen3 (Qwen3ForCausalLM): LLaMA's shape with an RMSNorm of each q and k head over its
# head_dim channels (self_attn.q_norm, self_attn.k_norm, weights [head_dim] shared by the
# heads) after the projection and before the rotation; no biases; otherwise the small
# Mistral's shape (head_dim apart from hidden_size / num_attention_heads), the head tied as
# Qwen3-0.6B has it.
QWEN3_CONFIG = dict(
    MISTRAL_CONFIG,
    architectures=["Qwen3ForCausalLM"],
    attention_bias=False,
    bos_token_id=62,
    eos_token_id=63,
    max_window_layers=2,
    model_type="qwen3",
    rms_norm_eps=1e-06,
    rope_scaling=None,
    tie_word_embeddings=True,
    use_sliding_window=False,
)


def head_dim_of(config):
    """LLaMA's head_dim key, else hidden_size / num_attention_heads (Qwen2 has no key)."""
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


def has_qk_norm(config):
    """Qwen3 normalises each q and k head (q_norm, k_norm); no config field says so."""
    return config["model_type"] == "qwen3"


def has_qkv_bias(config):
    return config["model_type"] == "qwen2"


# ---------------------------------------------------------------- safetensors I/O


def encode_safetensors(tensors):
    """Bytes of a safetensors file holding `tensors` (name -> float32 numpy array)."""
    header = {"__metadata__": {"format": "pt"}}
    offset_bytes = 0
    names = sorted(tensors)
    for name in names:
        array = tensors[name]
        assert array.dtype == np.float32, name
        size_bytes = array.size * 4
        header[name] = {
            "dtype": "F32",
            "shape": list(array.shape),
            "data_offsets": [offset_bytes, offset_bytes + size_bytes],
        }
        offset_bytes += size_bytes
    header_bytes = json.dumps(header, separators=(",", ":"), sort_keys=True).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)
    parts = [struct.pack("<Q", len(header_bytes)), header_bytes]
    parts += [np.ascontiguousarray(tensors[name], dtype="<f4").tobytes() for name in names]
    return b"".join(parts)


def decode_safetensors(data):
    """Independent parse of `encode_safetensors` output, checking the layout rules."""
    (header_len,) = struct.unpack("<Q", data[:8])
    assert header_len % 8 == 0
    header = json.loads(data[8 : 8 + header_len].decode("utf-8"))
    assert header.pop("__metadata__") == {"format": "pt"}
    body = data[8 + header_len :]
    tensors = {}
    expected_begin = 0
    for name in sorted(header):
        entry = header[name]
        begin, end = entry["data_offsets"]
        assert entry["dtype"] == "F32" and begin == expected_begin, name
        assert end - begin == 4 * math.prod(entry["shape"]), name
        tensors[name] = np.frombuffer(body[begin:end], dtype="<f4").reshape(entry["shape"])
        expected_begin = end
    assert expected_begin == len(body), "trailing bytes after the last tensor"
    return tensors


# ---------------------------------------------------------------- parameters


def gpt2_parameter_shapes(config):
    """(name, shape, kind) in GPT2LMHeadModel's module order; lm_head is tied to wte."""
    width = config["n_embd"]
    inner = config["n_inner"] or 4 * width
    shapes = [
        ("transformer.wte.weight", [config["vocab_size"], width], "matrix"),
        ("transformer.wpe.weight", [config["n_positions"], width], "matrix"),
    ]
    for layer in range(config["n_layer"]):
        prefix = f"transformer.h.{layer}."
        # Conv1D stores weight as [in, out]: y = x @ weight + bias.
        shapes += [
            (prefix + "ln_1.weight", [width], "norm"),
            (prefix + "ln_1.bias", [width], "bias"),
            (prefix + "attn.c_attn.weight", [width, 3 * width], "matrix"),
            (prefix + "attn.c_attn.bias", [3 * width], "bias"),
            (prefix + "attn.c_proj.weight", [width, width], "matrix"),
            (prefix + "attn.c_proj.bias", [width], "bias"),
            (prefix + "ln_2.weight", [width], "norm"),
            (prefix + "ln_2.bias", [width], "bias"),
            (prefix + "mlp.c_fc.weight", [width, inner], "matrix"),
            (prefix + "mlp.c_fc.bias", [inner], "bias"),
            (prefix + "mlp.c_proj.weight", [inner, width], "matrix"),
            (prefix + "mlp.c_proj.bias", [width], "bias"),
        ]
    shapes += [
        ("transformer.ln_f.weight", [width], "norm"),
        ("transformer.ln_f.bias", [width], "bias"),
    ]
    return shapes


def llama_parameter_shapes(config):
    """(name, shape, kind) in LlamaForCausalLM's module order; nn.Linear is [out, in]."""
    width = config["hidden_size"]
    head_dim = head_dim_of(config)
    q_width = config["num_attention_heads"] * head_dim
    kv_width = config["num_key_value_heads"] * head_dim
    inner = config["intermediate_size"]
    shapes = [("model.embed_tokens.weight", [config["vocab_size"], width], "matrix")]
    for layer in range(config["num_hidden_layers"]):
        prefix = f"model.layers.{layer}."
        shapes += [
            (prefix + "input_layernorm.weight", [width], "norm"),
        ]
        for projection, out_width in (("q_proj", q_width), ("k_proj", kv_width),
                                      ("v_proj", kv_width)):
            shapes.append((prefix + f"self_attn.{projection}.weight", [out_width, width], "matrix"))
            if has_qkv_bias(config):
                shapes.append((prefix + f"self_attn.{projection}.bias", [out_width], "bias"))
        if has_qk_norm(config):
            shapes += [(prefix + "self_attn.q_norm.weight", [head_dim], "norm"),
                       (prefix + "self_attn.k_norm.weight", [head_dim], "norm")]
        shapes += [
            (prefix + "self_attn.o_proj.weight", [width, q_width], "matrix"),
            (prefix + "post_attention_layernorm.weight", [width], "norm"),
            (prefix + "mlp.gate_proj.weight", [inner, width], "matrix"),
            (prefix + "mlp.up_proj.weight", [inner, width], "matrix"),
            (prefix + "mlp.down_proj.weight", [width, inner], "matrix"),
        ]
    shapes.append(("model.norm.weight", [width], "norm"))
    if not config["tie_word_embeddings"]:
        shapes.append(("lm_head.weight", [config["vocab_size"], width], "matrix"))
    return shapes


def draw_parameters(shapes, generator):
    """name -> float32 tensor, drawn in `shapes` order from `generator`."""
    parameters = {}
    for name, shape, kind in shapes:
        normal = torch.randn(shape, generator=generator, dtype=torch.float32)
        if kind == "matrix":
            parameters[name] = normal * MATRIX_STD
        elif kind == "norm":
            parameters[name] = 1.0 + 0.1 * normal
        else:
            parameters[name] = 0.1 * normal
    return parameters


# ---------------------------------------------------------------- shared pieces


def causal_attention(query, key, value):
    """softmax(q k^T / sqrt(head_dim)) v over [B, heads, T, head_dim], causal."""
    seq_len, head_dim = query.shape[-2], query.shape[-1]
    scores = query @ key.transpose(-1, -2) / math.sqrt(head_dim)
    allowed = torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ value


def naive_causal_attention(query, key, value, kv_head_of=lambda head: head):
    """Scalar loops over numpy arrays: the specification `causal_attention` must meet.
    `kv_head_of` maps a query head to the key/value head it reads (GQA)."""
    q, k, v = (t.detach().numpy() for t in (query, key, value))
    batch, heads, seq_len, head_dim = q.shape
    out = np.zeros_like(q)
    for b in range(batch):
        for h in range(heads):
            g = kv_head_of(h)
            for t in range(seq_len):
                scores = [
                    sum(q[b, h, t, d] * k[b, g, s, d] for d in range(head_dim)) / math.sqrt(head_dim)
                    for s in range(t + 1)
                ]
                top = max(scores)
                weights = [math.exp(score - top) for score in scores]
                total = sum(weights)
                for s in range(t + 1):
                    out[b, h, t] += weights[s] / total * v[b, g, s]
    return torch.from_numpy(out)


def mean_cross_entropy(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# ---------------------------------------------------------------- GPT-2


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def gpt2_forward(config, params, input_ids, attention=causal_attention, lm_head=None):
    """Logits [B, T, V] of GPT2LMHeadModel. `lm_head` overrides the tied wte (a test)."""
    batch, seq_len = input_ids.shape
    width, heads = config["n_embd"], config["n_head"]
    head_dim = width // heads
    eps = config["layer_norm_epsilon"]

    def layer_norm(x, prefix):
        return F.layer_norm(x, (width,), params[prefix + ".weight"], params[prefix + ".bias"], eps)

    def conv1d(x, prefix):
        return x @ params[prefix + ".weight"] + params[prefix + ".bias"]

    def split_heads(x):
        return x.view(batch, seq_len, heads, head_dim).transpose(1, 2)

    positions = torch.arange(seq_len)
    x = params["transformer.wte.weight"][input_ids] + params["transformer.wpe.weight"][positions]
    for layer in range(config["n_layer"]):
        prefix = f"transformer.h.{layer}."
        qkv = conv1d(layer_norm(x, prefix + "ln_1"), prefix + "attn.c_attn")
        query, key, value = (split_heads(part) for part in qkv.split(width, dim=2))
        merged = attention(query, key, value).transpose(1, 2).reshape(batch, seq_len, width)
        x = x + conv1d(merged, prefix + "attn.c_proj")
        hidden = gelu_new(conv1d(layer_norm(x, prefix + "ln_2"), prefix + "mlp.c_fc"))
        x = x + conv1d(hidden, prefix + "mlp.c_proj")
    x = layer_norm(x, "transformer.ln_f")
    head = params["transformer.wte.weight"] if lm_head is None else lm_head
    return x @ head.T


# ---------------------------------------------------------------- LLaMA


def rope_inverse_frequencies(config):
    """inv_freq [head_dim / 2] in float32, as transformers' modeling_rope_utils computes it:
    the default parameters, then the "linear" or "llama3" scaling of config["rope_scaling"]
    (same operations in the same order, on float32 tensors with Python scalars)."""
    head_dim = head_dim_of(config)
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    inv_freq = 1.0 / (config["rope_theta"] ** exponents)
    scaling = config.get("rope_scaling")
    kind = None if scaling is None else scaling.get("rope_type", scaling.get("type"))
    if kind in (None, "default"):
        return inv_freq
    factor = scaling["factor"]
    if kind == "linear":
        return inv_freq / factor
    assert kind == "llama3", kind
    low_freq_factor = scaling["low_freq_factor"]
    high_freq_factor = scaling["high_freq_factor"]
    old_context_len = scaling["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (
        high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def rope_tables(config, seq_len, angle_dtype=torch.float64):
    """cos, sin [T, head_dim] in float64. inv_freq is computed in float32 as
    LlamaRotaryEmbedding does; the angles and their cos/sin in `angle_dtype`
    (Hugging Face itself uses float32 there; float64 is the exact value)."""
    inv_freq = rope_inverse_frequencies(config)
    assert inv_freq.dtype == torch.float32
    angles = torch.arange(seq_len, dtype=angle_dtype)[:, None] * inv_freq.to(angle_dtype)[None, :]
    doubled = torch.cat((angles, angles), dim=-1)
    return doubled.cos().double(), doubled.sin().double()


def rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rope(x, cos, sin):
    return x * cos + rotate_half(x) * sin


def repeat_kv(x, repeats):
    """[B, kv_heads, T, D] -> [B, kv_heads * repeats, T, D]; kv head j serves query
    heads j*repeats .. j*repeats + repeats - 1."""
    batch, kv_heads, seq_len, head_dim = x.shape
    expanded = x[:, :, None].expand(batch, kv_heads, repeats, seq_len, head_dim)
    return expanded.reshape(batch, kv_heads * repeats, seq_len, head_dim)


def llama_forward(config, params, input_ids, naive_attention=False, lm_head=None,
                  angle_dtype=torch.float64):
    """Logits [B, T, V] of LlamaForCausalLM. `lm_head` overrides the tied embedding."""
    batch, seq_len = input_ids.shape
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim, repeats = head_dim_of(config), heads // kv_heads
    eps = config["rms_norm_eps"]
    cos, sin = rope_tables(config, seq_len, angle_dtype)

    def rms_norm(x, name):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * params[name]

    def linear(x, name):
        return x @ params[name].T

    def projection(x, name):  # nn.Linear: with a bias where the model has one (Qwen2)
        bias = params.get(name + ".bias")
        out = linear(x, name + ".weight")
        return out if bias is None else out + bias

    def split_heads(x, count):
        return x.view(batch, seq_len, count, head_dim).transpose(1, 2)

    x = params["model.embed_tokens.weight"][input_ids]
    for layer in range(config["num_hidden_layers"]):
        prefix = f"model.layers.{layer}."
        normed = rms_norm(x, prefix + "input_layernorm.weight")
        query = split_heads(projection(normed, prefix + "self_attn.q_proj"), heads)
        key = split_heads(projection(normed, prefix + "self_attn.k_proj"), kv_heads)
        value = split_heads(projection(normed, prefix + "self_attn.v_proj"), kv_heads)
        if has_qk_norm(config):  # Qwen3: over each head's head_dim channels, before RoPE
            query = rms_norm(query, prefix + "self_attn.q_norm.weight")
            key = rms_norm(key, prefix + "self_attn.k_norm.weight")
        query, key = apply_rope(query, cos, sin), apply_rope(key, cos, sin)
        if naive_attention:
            mixed = naive_causal_attention(query, key, value, lambda h: h // repeats)
        else:
            mixed = causal_attention(query, repeat_kv(key, repeats), repeat_kv(value, repeats))
        mixed = mixed.transpose(1, 2).reshape(batch, seq_len, heads * head_dim)
        x = x + linear(mixed, prefix + "self_attn.o_proj.weight")
        normed = rms_norm(x, prefix + "post_attention_layernorm.weight")
        gate = F.silu(linear(normed, prefix + "mlp.gate_proj.weight"))
        up = linear(normed, prefix + "mlp.up_proj.weight")
        x = x + linear(gate * up, prefix + "mlp.down_proj.weight")
    x = rms_norm(x, "model.norm.weight")
    if lm_head is None:
        lm_head = params.get("lm_head.weight", params["model.embed_tokens.weight"])
    return x @ lm_head.T


# ---------------------------------------------------------------- self-checks


def check(condition, message):
    print(("  ok   " if condition else "  FAIL ") + message)
    assert condition, message


def max_abs(a, b):
    return float((a - b).abs().max())


def check_tied_head(name, forward, params, embedding_name, input_ids, targets, grads):
    """A tied head must equal an explicit copy of the embedding used as lm_head, and the
    tied gradient must be the sum of the embedding-lookup and head gradients."""
    untied = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    head = untied[embedding_name].detach().clone().requires_grad_(True)
    logits = forward(untied, input_ids, lm_head=head)
    mean_cross_entropy(logits, targets).backward()
    summed = untied[embedding_name].grad + head.grad
    check(max_abs(summed, grads[embedding_name]) < 1e-12,
          f"{name}: tied grad = lookup grad + head grad (max diff "
          f"{max_abs(summed, grads[embedding_name]):.1e})")
    unused = sorted(set(range(head.shape[0])) - set(input_ids.flatten().tolist()))
    check(bool((untied[embedding_name].grad[unused] == 0).all()) and
          bool((grads[embedding_name][unused] != 0).any()),
          f"{name}: rows of {len(unused)} unused tokens get gradient only via the head")


def check_finite_differences(name, loss_of, params, grads, picks):
    """Central differences in float64 on a few elements against autograd."""
    step = 1e-6
    worst = 0.0
    for param_name, flat_index in picks:
        with torch.no_grad():
            flat = params[param_name].view(-1)
            saved = flat[flat_index].item()
            flat[flat_index] = saved + step
            plus = loss_of(params).item()
            flat[flat_index] = saved - step
            minus = loss_of(params).item()
            flat[flat_index] = saved
        numeric = (plus - minus) / (2 * step)
        analytic = grads[param_name].view(-1)[flat_index].item()
        worst = max(worst, abs(numeric - analytic) / max(1e-3, abs(analytic)))
    check(worst < 1e-5, f"{name}: {len(picks)} finite differences match autograd "
          f"(worst relative error {worst:.1e})")


def check_rope_relative_positions(config):
    """q.k after rotate-half RoPE depends on positions only through their difference."""
    generator = torch.Generator().manual_seed(7)
    head_dim, span = config["head_dim"], config["max_position_embeddings"]
    query = torch.randn(head_dim, generator=generator, dtype=torch.float64)
    key = torch.randn(head_dim, generator=generator, dtype=torch.float64)
    for angle_dtype, tolerance in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
        cos, sin = rope_tables(config, 2 * span, angle_dtype)
        rotated_q = apply_rope(query, cos, sin)  # [2*span, head_dim], row = position
        rotated_k = apply_rope(key, cos, sin)
        scores = rotated_q @ rotated_k.T
        worst = 0.0
        for shift in range(1, span):
            worst = max(worst, max_abs(scores[shift:shift + span, shift:shift + span],
                                       scores[:span, :span]))
        check(worst < tolerance, f"RoPE ({angle_dtype}): q.k(m+s, n+s) == q.k(m, n) for "
              f"shifts < {span} (max diff {worst:.1e})")
    distinct = scores.diagonal(0)[:1].item(), scores.diagonal(-1)[:1].item()
    check(abs(distinct[0] - distinct[1]) > 1e-3, "RoPE: scores do change with the offset")
    # The rotation pairs dimension i with i + head_dim/2 (not 2i with 2i+1).
    cos, sin = rope_tables(config, 2)
    unit = torch.zeros(head_dim, dtype=torch.float64)
    unit[0] = 1.0
    moved = apply_rope(unit, cos[1], sin[1])
    check(abs(moved[head_dim // 2].item() - sin[1, 0].item()) < 1e-15 and moved[1].item() == 0,
          "RoPE: rotate-half layout pairs dimension i with i + head_dim/2")


def check_rope_scaling(config):
    """A llama3 scaling's frequencies against a scalar float64 loop over its three bands."""
    scaling = config.get("rope_scaling")
    if scaling is None:
        return
    got = rope_inverse_frequencies(config).double()
    head_dim, theta = config["head_dim"], config["rope_theta"]
    context, factor = scaling["original_max_position_embeddings"], scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    bands = set()
    for i in range(head_dim // 2):
        plain = theta ** (-2.0 * i / head_dim)
        wavelength = 2 * math.pi / plain
        if wavelength < context / high:
            want, band = plain, "kept"
        elif wavelength > context / low:
            want, band = plain / factor, "divided"
        else:
            mix = (context / wavelength - low) / (high - low)
            want, band = (1 - mix) * plain / factor + mix * plain, "mixed"
        bands.add(band)
        check(abs(got[i].item() - want) <= 1e-6 * want,
              f"llama3 rope: pair {i} ({band}) {got[i].item():.7g} vs {want:.7g}")
    check(bands == {"kept", "mixed", "divided"}, f"llama3 rope: pairs in every band {bands}")


# ---------------------------------------------------------------- models


def build_model(name, config, seed, out_dir):
    print(f"{name}:")
    generator = torch.Generator().manual_seed(seed)
    is_gpt2 = config["model_type"] == "gpt2"
    shapes = gpt2_parameter_shapes(config) if is_gpt2 else llama_parameter_shapes(config)
    stored = draw_parameters(shapes, generator)
    vocab = config["vocab_size"]
    input_ids = torch.randint(0, vocab, (BATCH, SEQ_LEN), generator=generator)
    targets = torch.randint(0, vocab, (BATCH, SEQ_LEN), generator=generator)

    if is_gpt2:
        def forward(p, ids, **kwargs):
            return gpt2_forward(config, p, ids, **kwargs)
        embedding_name = "transformer.wte.weight"
    else:
        def forward(p, ids, **kwargs):
            return llama_forward(config, p, ids, **kwargs)
        embedding_name = "model.embed_tokens.weight"

    params = {k: v.double().requires_grad_(True) for k, v in stored.items()}
    logits = forward(params, input_ids)
    loss = mean_cross_entropy(logits, targets)
    loss.backward()
    grads = {k: v.grad.detach().clone() for k, v in params.items()}
    logits = logits.detach()
    print(f"  loss {loss.item():.10f} (ln V = {math.log(vocab):.4f})")

    # Tied or untied head.
    tied = config["tie_word_embeddings"]
    check(("lm_head.weight" in stored) == (not tied) and
          not any(k.startswith("lm_head") for k in stored if tied),
          f"tie_word_embeddings={tied}: lm_head.weight {'absent' if tied else 'present'}")
    if tied:
        check_tied_head(name, forward, params, embedding_name, input_ids, targets, grads)
    else:
        unused = sorted(set(range(vocab)) - set(input_ids.flatten().tolist()))
        check(bool((grads[embedding_name][unused] == 0).all()) and
              bool((grads["lm_head.weight"][unused] != 0).all()),
              f"untied: {len(unused)} unused token rows have zero embedding grad, "
              f"nonzero head grad")

    # Attention against the scalar-loop specification, through the whole model.
    with torch.no_grad():
        if is_gpt2:
            naive = forward(params, input_ids, attention=naive_causal_attention)
        else:
            naive = forward(params, input_ids, naive_attention=True)
    check(max_abs(naive, logits) < 1e-12,
          f"logits with naive loop attention match (max diff {max_abs(naive, logits):.1e})")
    if not is_gpt2:
        with torch.no_grad():
            fp32_angles = forward(params, input_ids, angle_dtype=torch.float32)
        print(f"  note: float32 RoPE angles (as HF computes them) move logits by at most "
              f"{max_abs(fp32_angles, logits):.1e}")

    def loss_of(p):
        return mean_cross_entropy(forward(p, input_ids), targets)
    picks = [(n, (7 * i) % math.prod(s)) for i, (n, s, _) in enumerate(shapes)][::3]
    check_finite_differences(name, loss_of, params, grads, picks)
    check(len(grads) == len(stored) and all(grads[k].shape == stored[k].shape for k in stored),
          f"one gradient per parameter ({len(grads)}), same shapes")

    model_tensors = {k: v.numpy() for k, v in stored.items()}
    reference = {
        "inputs": input_ids.float().numpy(),
        "targets": targets.float().numpy(),
        "logits": logits.float().numpy(),
        "loss": loss.detach().float().reshape(1).numpy(),
    }
    reference.update({"grad." + k: v.float().numpy() for k, v in grads.items()})
    check(bool((reference["inputs"] == input_ids.numpy()).all()), "token ids exact in F32")

    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        f.write(json.dumps(config, indent=2, sort_keys=True) + "\n")
    for file_name, tensors in (("model.safetensors", model_tensors),
                               ("reference.safetensors", reference)):
        data = encode_safetensors(tensors)
        decoded = decode_safetensors(data)
        check(decoded.keys() == tensors.keys() and
              all(np.array_equal(decoded[k], tensors[k]) for k in tensors),
              f"{file_name} reads back identical ({len(tensors)} tensors, {len(data)} bytes)")
        with open(os.path.join(out_dir, file_name), "wb") as f:
            f.write(data)
    return loss.item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output folder, e.g. tests/testdata/hf")
    args = parser.parse_args()
    torch.set_num_threads(1)  # one summation order, so reruns are byte-identical

    check_rope_relative_positions(LLAMA_CONFIG)
    check_rope_scaling(LLAMA_TIED_CONFIG)
    losses = {}
    for seed, (name, config) in enumerate((("gpt2-tiny", GPT2_CONFIG),
                                           ("llama-tiny", LLAMA_CONFIG),
                                           ("llama-tiny-tied", LLAMA_TIED_CONFIG),
                                           ("qwen2-tiny", QWEN2_CONFIG),
                                           ("mistral-tiny-hd", MISTRAL_CONFIG),
                                           ("qwen3-tiny", QWEN3_CONFIG))):
        losses[name] = build_model(name, config, 1000 + seed, os.path.join(args.out, name))

    total_bytes = 0
    for root, _, files in os.walk(args.out):
        for file_name in sorted(files):
            if file_name != "README.md":
                total_bytes += os.path.getsize(os.path.join(root, file_name))
    check(total_bytes < SIZE_BUDGET_BYTES,
          f"generated files total {total_bytes} bytes (< {SIZE_BUDGET_BYTES})")
    for name, loss in losses.items():
        print(f"loss {name}: {loss:.10f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
