#!/usr/bin/env python3
"""tests/hellaswag_ref.py — the HellaSwag scoring rule in float64, with numpy alone: an oracle for
`./train eval --hellaswag`, written from the formats' definitions (docs/formats.md), sharing no
code with seedgpt.

    hellaswag_ref.py MODEL.bin EVAL.bin        one line per example:
        example I label L pick P pick_norm Q sums s0 s1 s2 s3 lens m0 m1 m2 m3
    then "total N correct C correct_norm D".

MODEL.bin: llm.c's fp32 model file (int32 header[256] = 20240326, 3, maxT, V, L, NH, C, Vp; then
the tensors in llm.c's order). EVAL.bin: llm.c's multiple-choice eval file (int32 header[256] =
20240522, 1, examples, longest record bytes; then per example the uint16 record 65535, bytes,
index, label, endings, context length, context, and per ending its length and tokens).

The forward is GPT-2's (pre-norm blocks, tanh GELU, tied LM head, LayerNorm eps 1e-5), in float64
over the file's fp32 weights. Per ending, with l_t the cross-entropy of the row's next token at
position t: sum = the sum of l_t over the positions whose next token is an ending token (the last
context token predicts the first ending token), mean = sum / (ending length); pick = argmin sum,
pick_norm = argmin mean, the lower index on ties.
"""
import sys

import numpy as np


def read_model(path):
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:1024], dtype="<i4")
    if h[0] != 20240326 or h[1] != 3:
        raise SystemExit(f"{path}: not an llm.c fp32 model file (magic {h[0]}, version {h[1]})")
    maxT, V, L, NH, C, Vp = (int(x) for x in h[2:8])
    w = np.frombuffer(raw[1024:], dtype="<f4").astype(np.float64)
    shapes = [("wte", (Vp, C)), ("wpe", (maxT, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
              ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)),
              ("attprojb", (L, C)), ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)),
              ("fcb", (L, 4 * C)), ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)),
              ("lnfw", (C,)), ("lnfb", (C,))]
    p, at = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        p[name] = w[at:at + n].reshape(shape)
        at += n
    if at != w.size:
        raise SystemExit(f"{path}: {w.size} floats, the header's shapes need {at}")
    return dict(maxT=maxT, V=V, L=L, NH=NH, C=C), p


def read_eval(path):
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:1024], dtype="<i4")
    if h[0] != 20240522 or h[1] != 1:
        raise SystemExit(f"{path}: not an eval file (magic {h[0]}, version {h[1]})")
    words = np.frombuffer(raw[1024:], dtype="<u2").astype(np.int64)
    examples, at = [], 0
    for i in range(int(h[2])):
        assert words[at] == 65535 and words[at + 2] == i, f"example {i}: bad record start"
        nbytes = int(words[at + 1])
        rec = words[at:at + nbytes // 2]
        label, nend, nctx = int(rec[3]), int(rec[4]), int(rec[5])
        ctx = [int(t) for t in rec[6:6 + nctx]]
        q, ends = 6 + nctx, []
        for _ in range(nend):
            m = int(rec[q])
            ends.append([int(t) for t in rec[q + 1:q + 1 + m]])
            q += 1 + m
        assert q == len(rec), f"example {i}: fields and size disagree"
        examples.append((label, ctx, ends))
        at += nbytes // 2
    assert at == len(words), "bytes after the last example"
    return examples


def layernorm(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * w + b


def gelu(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def token_losses(cfg, p, tokens):
    """Cross-entropy of tokens[t+1] given tokens[0..t], for t = 0 .. len-2 (float64)."""
    inp, tgt = np.array(tokens[:-1]), np.array(tokens[1:])
    T, C, NH = len(inp), cfg["C"], cfg["NH"]
    hd = C // NH
    x = p["wte"][inp] + p["wpe"][:T]
    causal = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(cfg["L"]):
        a = layernorm(x, p["ln1w"][l], p["ln1b"][l])
        qkv = a @ p["qkvw"][l].T + p["qkvb"][l]
        q, k, v = (qkv[:, i * C:(i + 1) * C].reshape(T, NH, hd).transpose(1, 0, 2) for i in range(3))
        s = q @ k.transpose(0, 2, 1) / np.sqrt(hd) + causal
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        y = (s @ v).transpose(1, 0, 2).reshape(T, C)
        x = x + y @ p["attprojw"][l].T + p["attprojb"][l]
        a = layernorm(x, p["ln2w"][l], p["ln2b"][l])
        x = x + gelu(a @ p["fcw"][l].T + p["fcb"][l]) @ p["fcprojw"][l].T + p["fcprojb"][l]
    x = layernorm(x, p["lnfw"], p["lnfb"])
    logits = x @ p["wte"][:cfg["V"]].T
    mx = logits.max(-1, keepdims=True)
    lse = mx[:, 0] + np.log(np.exp(logits - mx).sum(-1))
    return lse - logits[np.arange(T), tgt]


def argmin_first(v):
    best = 0
    for k in range(1, len(v)):
        if v[k] < v[best]:
            best = k
    return best


def main():
    cfg, p = read_model(sys.argv[1])
    total = correct = correct_norm = 0
    for i, (label, ctx, ends) in enumerate(read_eval(sys.argv[2])):
        sums, lens = [], []
        for end in ends:
            l = token_losses(cfg, p, ctx + end)
            # positions len(ctx)-1 .. len(ctx)+len(end)-2 predict the ending's tokens
            sums.append(float(l[len(ctx) - 1:len(ctx) - 1 + len(end)].sum()))
            lens.append(len(end))
        pick = argmin_first(sums)
        pick_norm = argmin_first([s / m for s, m in zip(sums, lens)])
        total += 1
        correct += pick == label
        correct_norm += pick_norm == label
        print(f"example {i} label {label} pick {pick} pick_norm {pick_norm} sums "
              + " ".join(repr(s) for s in sums) + " lens " + " ".join(str(m) for m in lens))
    print(f"total {total} correct {correct} correct_norm {correct_norm}")


if __name__ == "__main__":
    main()
