#!/usr/bin/env python3
"""PyTorch reference for a tiny Llama-style decoder-only transformer.

Builds the model below from a fixed seed, decodes greedily from a prompt, and
writes under testdata/decoder/:

  model.safetensors  the weights, float32, little-endian, row-major, written
                     by tools/mha_parity.py's write_safetensors (Debian has no
                     python3-safetensors): 8-byte little-endian header length,
                     JSON header padded with spaces to 8 bytes (its
                     __metadata__ is {"format": "pt"}), data in sorted-name order.
  reference.json     {"config": {...}, "seed": N, "prompt": [8 ints],
                     "generated": [24 ints], "logits": [[256 floats], ...],
                     "margins": [24 floats], "min_margin": float,
                     "float32_max_abs_diff": float}. logits has one row per
                     position p = 0..30 of the sequence prompt + generated
                     (32 tokens); row p is the output at position p, the
                     prediction of token p+1: rows 0..7 are the prompt's
                     positions, rows 7..30 chose the 24 generated tokens.
                     margins[s] = top-1 minus top-2 logit of row 7+s;
                     min_margin is their minimum. Floats are Python's repr of
                     the float64 values (shortest text that round-trips).

Config: vocab V = 256, d_model D = 128, n_layers = 2, n_heads = 8 query heads,
n_kv_heads = 2, head_dim = 16, ffn_dim = 256 (SwiGLU), norm_eps = 1e-5,
rope_theta = 10000, output projection tied to embed; no biases anywhere.

Tensors (nn.Linear layout: weight[out, in], y = x @ W.T), names exactly:

  embed                 (256, 128)
  layers.{i}.attn_norm  (128)          for i = 0, 1
  layers.{i}.wq         (128, 128)
  layers.{i}.wk         (32, 128)
  layers.{i}.wv         (32, 128)
  layers.{i}.wo         (128, 128)
  layers.{i}.mlp_norm   (128)
  layers.{i}.w_gate     (256, 128)
  layers.{i}.w_up       (256, 128)
  layers.{i}.w_down     (128, 256)
  final_norm            (128)

Forward for tokens t_0..t_n, position p = index in the sequence (from 0):

  rmsnorm(x, w) = x / sqrt(mean(x^2) + eps) * w     (mean over the D values)
  x = embed[t]                                       (row t, one per position)
  for each layer:
    h = rmsnorm(x, attn_norm)
    q = h @ wq.T  -> 8 heads of 16: head j is columns 16j .. 16j+15
    k = h @ wk.T  -> 2 heads of 16, same split
    v = h @ wv.T  -> 2 heads of 16, same split
    RoPE on every head of q and k (not v), HF Llama "rotate_half" pairing,
    i.e. element i pairs with element i+8, not 2i with 2i+1: for i = 0..7,
      inv_freq_i = theta^(-2i/16), angle = p * inv_freq_i,
      out[i]   = x[i]   * cos(angle) - x[i+8] * sin(angle)
      out[i+8] = x[i+8] * cos(angle) + x[i]   * sin(angle)
    attention per query head hq, KV head hq // 4 (GQA as HF repeat_kv:
      query heads 0-3 read KV head 0, 4-7 read KV head 1):
      s[p, p'] = q_p . k_p' / sqrt(16)   for p' <= p (causal; p' > p excluded),
      softmax over p', a_p = sum_p' softmax * v_p'
    a = the 8 heads' outputs concatenated in head order (128 values)
    x = x + a @ wo.T
    h2 = rmsnorm(x, mlp_norm)
    x = x + (silu(h2 @ w_gate.T) * (h2 @ w_up.T)) @ w_down.T,
      silu(z) = z / (1 + exp(-z))
  logits = rmsnorm(x, final_norm) @ embed.T          (256 per position)

Generation: greedy, 24 steps: each step runs the full causal forward of the
sequence so far and appends argmax of the last position's logits. Because the
forward is causal, row p of the final 31-token forward (which is what
reference.json holds) is the row each step used.

Initialisation: torch.manual_seed(seed), then, in the order of the table above
(each layer's tensors in the listed order), embed ~ N(0, 0.5^2); every
weight matrix ~ N(0, 4 / in_features) (std 2 / sqrt(in)); every norm weight
= 1 + 0.1 * N(0, 1). Then the prompt: torch.randint(0, 256, (8,)) from the
same generator. With N(0, 1/in) weights the residual stream is dominated by
the token's own embedding and greedy decoding repeats one token; the larger
scale gives a varied sequence. Seeds are tried from SEED upward until every
generated step's margin (top-1 minus top-2 logit, float64 run) is at least
MIN_MARGIN = 0.05; reference.json records the seed used.

Precision: the weights are float32; the expected values come from the model
run in float64 on exactly those values (float32 -> float64 is exact), so they
are PyTorch's answer without float32 rounding. RoPE's cos and sin are
computed in float64 (and rounded to float32 for the float32 run). The script
also runs the model in float32 and asserts its logits agree with the float64
ones to F32_TOL = 1e-4 absolute (logit magnitudes are up to about 25) and
that float32 greedy decoding picks the same 24 tokens; the observed maximum
difference is stored as float32_max_abs_diff.

Determinism: one thread (torch.set_num_threads(1)); reruns write identical
bytes. The Go tests read the committed files and never run Python, so CI
needs no PyTorch. To regenerate (Debian bookworm; torch 1.13.1+dfsg-4 made
the committed files):

  apt-get update && apt-get install -y python3-torch python3-numpy
  /usr/bin/python3 tools/decoder_reference.py    # from the repository root
"""

import json
import math
import os
import sys

import torch

sys.dont_write_bytecode = True  # no tools/__pycache__ from the import below
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mha_parity import write_safetensors  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "decoder")

SEED = 0
MIN_MARGIN = 0.05
F32_TOL = 1e-4

VOCAB, D_MODEL, N_LAYERS, N_HEADS, N_KV_HEADS, HEAD_DIM, FFN_DIM = 256, 128, 2, 8, 2, 16, 256
NORM_EPS, ROPE_THETA = 1e-5, 10000.0
PROMPT_LEN, N_GENERATE = 8, 24
EMBED_STD, LINEAR_GAIN, NORM_STD = 0.5, 2.0, 0.1

CONFIG = {
    "vocab": VOCAB,
    "d_model": D_MODEL,
    "n_layers": N_LAYERS,
    "n_heads": N_HEADS,
    "n_kv_heads": N_KV_HEADS,
    "head_dim": HEAD_DIM,
    "ffn_dim": FFN_DIM,
    "norm_eps": NORM_EPS,
    "rope_theta": ROPE_THETA,
    "rope_style": "rotate_half",
    "tied_embeddings": True,
    "activation": "swiglu",
    "prompt_len": PROMPT_LEN,
    "n_generate": N_GENERATE,
}


def layer_shapes():
    """(suffix, shape) of one layer's tensors, in initialisation order."""
    q, kv = N_HEADS * HEAD_DIM, N_KV_HEADS * HEAD_DIM
    return [("attn_norm", (D_MODEL,)), ("wq", (q, D_MODEL)), ("wk", (kv, D_MODEL)),
            ("wv", (kv, D_MODEL)), ("wo", (D_MODEL, q)), ("mlp_norm", (D_MODEL,)),
            ("w_gate", (FFN_DIM, D_MODEL)), ("w_up", (FFN_DIM, D_MODEL)),
            ("w_down", (D_MODEL, FFN_DIM))]


def init_tensor(shape):
    if len(shape) == 1:  # a norm weight
        return 1 + NORM_STD * torch.randn(shape)
    return torch.randn(shape) * (LINEAR_GAIN / math.sqrt(shape[1]))


def build(seed):
    """float32 weights {name: tensor} and the prompt, from seed."""
    torch.manual_seed(seed)
    w = {"embed": torch.randn(VOCAB, D_MODEL) * EMBED_STD}
    for i in range(N_LAYERS):
        for suffix, shape in layer_shapes():
            w["layers.%d.%s" % (i, suffix)] = init_tensor(shape)
    w["final_norm"] = init_tensor((D_MODEL,))
    prompt = torch.randint(0, VOCAB, (PROMPT_LEN,)).tolist()
    return w, prompt


def rmsnorm(x, w):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + NORM_EPS) * w


def rope(x, pos):
    """x (T, heads, HEAD_DIM): rotate_half RoPE at positions pos (T,)."""
    half = HEAD_DIM // 2
    i = torch.arange(half, dtype=torch.float64)
    inv_freq = ROPE_THETA ** (-2 * i / HEAD_DIM)
    angle = pos.to(torch.float64)[:, None] * inv_freq  # (T, half)
    cos = torch.cos(angle).to(x.dtype)[:, None, :]
    sin = torch.sin(angle).to(x.dtype)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def forward(w, tokens):
    """Logits (T, VOCAB) of the full causal forward of tokens, in w's dtype."""
    T = len(tokens)
    pos = torch.arange(T)
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # true = blocked
    group = N_HEADS // N_KV_HEADS
    x = w["embed"][torch.tensor(tokens)]
    for i in range(N_LAYERS):
        p = "layers.%d." % i
        h = rmsnorm(x, w[p + "attn_norm"])
        q = rope((h @ w[p + "wq"].T).view(T, N_HEADS, HEAD_DIM), pos)
        k = rope((h @ w[p + "wk"].T).view(T, N_KV_HEADS, HEAD_DIM), pos)
        v = (h @ w[p + "wv"].T).view(T, N_KV_HEADS, HEAD_DIM)
        k = k.repeat_interleave(group, dim=1)  # query head j reads KV head j // group
        v = v.repeat_interleave(group, dim=1)
        s = torch.einsum("thd,shd->hts", q, k) / math.sqrt(HEAD_DIM)
        s = s.masked_fill(causal, float("-inf"))
        a = torch.einsum("hts,shd->thd", s.softmax(dim=-1), v).reshape(T, N_HEADS * HEAD_DIM)
        x = x + a @ w[p + "wo"].T
        h2 = rmsnorm(x, w[p + "mlp_norm"])
        x = x + (torch.nn.functional.silu(h2 @ w[p + "w_gate"].T) * (h2 @ w[p + "w_up"].T)) @ w[p + "w_down"].T
    return rmsnorm(x, w["final_norm"]) @ w["embed"].T


def margin(row):
    top = row.topk(2).values
    return (top[0] - top[1]).item()


def greedy(w, prompt):
    """The sequence prompt + N_GENERATE greedy tokens, recomputing each step."""
    tokens = list(prompt)
    for _ in range(N_GENERATE):
        tokens.append(int(forward(w, tokens)[-1].argmax()))
    return tokens


def write_reference(path, obj):
    """JSON with one logits row per line; floats as Python's float repr."""
    parts = []
    for key, val in obj.items():
        if key == "logits":
            rows = ",\n".join("  " + json.dumps(row) for row in val)
            parts.append(' "logits": [\n%s\n ]' % rows)
        else:
            parts.append(" %s: %s" % (json.dumps(key), json.dumps(val)))
    with open(path, "w") as f:
        f.write("{\n" + ",\n".join(parts) + "\n}\n")


def main():
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    print("torch", torch.__version__, file=sys.stderr)

    seed = SEED
    while True:
        w32, prompt = build(seed)
        w64 = {k: v.double() for k, v in w32.items()}
        with torch.no_grad():
            tokens = greedy(w64, prompt)
            logits = forward(w64, tokens[:-1])  # rows 0 .. PROMPT_LEN+N_GENERATE-2
        margins = [margin(logits[p]) for p in range(PROMPT_LEN - 1, len(tokens) - 1)]
        if min(margins) >= MIN_MARGIN:
            break
        print("seed %d: min margin %.4g < %g, trying the next" % (seed, min(margins), MIN_MARGIN), file=sys.stderr)
        seed += 1

    generated = tokens[PROMPT_LEN:]
    assert [int(logits[p].argmax()) for p in range(PROMPT_LEN - 1, len(tokens) - 1)] == generated
    assert torch.isfinite(logits).all()

    with torch.no_grad():
        logits32 = forward(w32, tokens[:-1])
        tokens32 = greedy(w32, prompt)
    diff = (logits32.double() - logits).abs().max().item()
    assert diff < F32_TOL, "float32 and float64 logits differ by %g" % diff
    assert tokens32 == tokens, "float32 greedy decoding picks other tokens"

    write_safetensors(os.path.join(OUT, "model.safetensors"), {k: v.numpy() for k, v in w32.items()})
    write_reference(os.path.join(OUT, "reference.json"), {
        "config": CONFIG,
        "seed": seed,
        "prompt": prompt,
        "generated": generated,
        "logits": logits.tolist(),
        "margins": margins,
        "min_margin": min(margins),
        "float32_max_abs_diff": diff,
    })
    print("seed", seed, "prompt", prompt, "generated", generated)
    print("min margin %.6g (step %d), float32 max |logit diff| %.3g, max |logit| %.4g"
          % (min(margins), margins.index(min(margins)), diff, logits.abs().max().item()))


if __name__ == "__main__":
    main()
