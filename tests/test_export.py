#!/usr/bin/env python3
"""tests/test_export.py — ./train export and ./train import, held to the safetensors format's
definition and to a GPT-2 forward written here (numpy only, no torch).

    python3 tests/test_export.py ./train build/tests/logits_harness

A random llm.c model file is written here (L 2, NH 4, C 32, maxT 16, V 300: wte padded to Vp 384;
every tensor random, LayerNorm weights around 1, so a swapped or misplaced tensor shows), then:
  - export: the safetensors file is read by this file's own reader (8-byte length, JSON header,
    offsets that cover the buffer exactly, data start 8-byte aligned); the names are
    GPT2LMHeadModel's (no lm_head: tied), the shapes Hugging Face's (Conv1D (in, out), wte with
    the 300 real rows), dtype F32; config.json has GPT-2's fields;
  - a float64 GPT-2 forward over the exported tensors gives the logits of seedgpt's own forward
    (tests/logits_harness.c) within 1e-5 relative (‖Δ‖/‖ref‖; ~1e-7 expected from fp32 rounding);
  - export then import gives the original file byte for byte; so does a file whose names lack the
    "transformer." prefix and that carries lm_head and the attention-mask buffers;
  - --dtype bf16: every weight is the round-to-nearest-even bf16 of the fp32 one (computed here
    from the bits), and importing it gives the widened values;
  - import of F16 (subnormals included) and BF16 tensors: each value widened exactly;
  - llm.c's bf16 model file (version 5) loads, widened exactly: its logits equal, bit for bit, those
    of the fp32 file of the widened values;
  - a model of GPT-2's vocabulary exports vocab.json, merges.txt (copies of the BPE folder's files)
    and tokenizer_config.json, and refuses, writing nothing, when the BPE folder lacks them;
  - refusals, exit status 2 and one line, writing nothing: a truncated file, a header length past
    the end, offsets overlapping by one byte, offsets past the end, a wrong dtype, an unknown dtype,
    a missing tensor, bad header JSON, an untied lm_head, import onto its own input, export of a
    grouped-query-head model (named), export whose tokenizer files would be written over themselves.
Output lines "ok   name: ...", "FAIL name: ...", "SKIP name: why" (tests/run.sh counts them).
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except Exception as e:  # noqa: BLE001
    print(f"SKIP export_import: cannot import numpy with {sys.executable} ({e})")
    sys.exit(0)

TOL = 1e-5
failed = 0
CFG = {"L": 2, "NH": 4, "C": 32, "maxT": 16, "V": 300}
ORDER = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
         "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
BLOCK = [("ln_1.weight", "ln1w", 0), ("ln_1.bias", "ln1b", 0), ("attn.c_attn.weight", "qkvw", 1),
         ("attn.c_attn.bias", "qkvb", 0), ("attn.c_proj.weight", "attprojw", 1),
         ("attn.c_proj.bias", "attprojb", 0), ("ln_2.weight", "ln2w", 0), ("ln_2.bias", "ln2b", 0),
         ("mlp.c_fc.weight", "fcw", 1), ("mlp.c_fc.bias", "fcb", 0),
         ("mlp.c_proj.weight", "fcprojw", 1), ("mlp.c_proj.bias", "fcprojb", 0)]
DSIZE = {"F32": 4, "F16": 2, "BF16": 2, "I32": 4, "F64": 8, "I64": 8, "U8": 1, "BOOL": 1}


def check(cond, name, msg):
    global failed
    msg = " | ".join(line for line in str(msg).splitlines() if line.strip())
    print(f"{'ok  ' if cond else 'FAIL'} {name}: {msg}", flush=True)
    if not cond:
        failed += 1


def pad_vocab(V):
    return (V + 127) // 128 * 128


# ---- llm.c model files ------------------------------------------------------------------------

def shapes(cfg):
    C, L, V, T = cfg["C"], cfg["L"], cfg["V"], cfg["maxT"]
    NH, NKV = cfg["NH"], cfg.get("NKV", cfg["NH"])
    QKV = (NH + 2 * NKV) * (C // NH)
    return {"wte": (pad_vocab(V), C), "wpe": (T, C), "ln1w": (L, C), "ln1b": (L, C),
            "qkvw": (L, QKV, C), "qkvb": (L, QKV), "attprojw": (L, C, C), "attprojb": (L, C),
            "ln2w": (L, C), "ln2b": (L, C), "fcw": (L, 4 * C, C), "fcb": (L, 4 * C),
            "fcprojw": (L, C, 4 * C), "fcprojb": (L, C), "lnfw": (C,), "lnfb": (C,)}


def random_model(cfg, seed):
    rng = np.random.default_rng(seed)
    t = {}
    for k, s in shapes(cfg).items():
        scale = 0.1 if k in ("wte", "wpe") else 0.05 if k.endswith("b") else 0.15
        x = (scale * rng.standard_normal(s)).astype(np.float32)
        if k in ("ln1w", "ln2w", "lnfw"):
            x = (1.0 + x).astype(np.float32)
        t[k] = x
    t["wte"][cfg["V"]:] = 0.0   # llm.c's padded rows are zero
    return t


def write_llmc(path, cfg, t, version=3, magic=20240326, extra=None):
    h = np.zeros(256, dtype="<i4")
    h[:8] = [magic, version, cfg["maxT"], cfg["V"], cfg["L"], cfg["NH"], cfg["C"], pad_vocab(cfg["V"])]
    for k, v in (extra or {}).items():
        h[k] = v
    with open(path, "wb") as f:
        f.write(h.tobytes())
        for k in ORDER:
            x = np.ascontiguousarray(t[k], dtype="<f4")
            f.write(bf16_bits(x).astype("<u2").tobytes() if version == 5 else x.tobytes())


def read_llmc_floats(path):
    return np.fromfile(path, dtype="<f4", offset=1024)


def bf16_bits(x):
    """Round to nearest, ties to even, from the bits: keep the top 16 bits, and add one to them when
    the dropped 16 are above half, or exactly half with the kept part odd."""
    u = np.ascontiguousarray(x, dtype="<f4").view("<u4").astype(np.uint64)
    hi, lo = u >> 16, u & 0xFFFF
    up = (lo > 0x8000) | ((lo == 0x8000) & ((hi & 1) == 1))
    return (hi + up).astype(np.uint16)


def widen_bf16(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


# ---- safetensors, from the format's definition ------------------------------------------------

def read_safetensors(path):
    """-> (header dict, {name: float32 array}, data start). Checks the definition's rules."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    assert 8 + n <= len(raw), "header past the end"
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k)
                   for k, v in header.items() if k != "__metadata__")
    at = 0
    for b, e, k in spans:
        assert b == at, f"{k}: begins at {b}, previous end {at}"
        at = e
    assert at == len(data), "the tensors do not cover the buffer"
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        buf = data[b:e]
        count = int(np.prod(v["shape"])) if v["shape"] else 1
        assert e - b == count * DSIZE[v["dtype"]], f"{k}: size"
        if v["dtype"] == "F32":
            a = np.frombuffer(buf, dtype="<f4")
        elif v["dtype"] == "BF16":
            a = widen_bf16(np.frombuffer(buf, dtype="<u2"))
        elif v["dtype"] == "F16":
            a = np.frombuffer(buf, dtype="<f2").astype(np.float32)
        else:
            raise AssertionError(f"{k}: dtype {v['dtype']}")
        out[k] = a.reshape(v["shape"])
    return header, out, 8 + n


def write_safetensors(path, entries, metadata=None, header_override=None, cut=0):
    """entries: [(name, dtype, shape, bytes)], back to back from offset 0."""
    header, at = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dt, shape, b in entries:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [at, at + len(b)]}
        at += len(b)
    h = header_override if header_override is not None else json.dumps(header).encode()
    blob = len(h).to_bytes(8, "little") + h + b"".join(e[3] for e in entries)
    with open(path, "wb") as f:
        f.write(blob[:len(blob) - cut] if cut else blob)
    return header


def hf_tensors(cfg, t, prefix="transformer."):
    """llm.c tensors -> [(Hugging Face name, float32 array)], Conv1D weights transposed."""
    V, L = cfg["V"], cfg["L"]
    out = [(prefix + "wte.weight", t["wte"][:V]), (prefix + "wpe.weight", t["wpe"])]
    for i in range(L):
        for key, name, conv in BLOCK:
            x = t[name][i]
            out.append((f"{prefix}h.{i}.{key}", np.ascontiguousarray(x.T) if conv else x))
    out += [(prefix + "ln_f.weight", t["lnfw"]), (prefix + "ln_f.bias", t["lnfb"])]
    return out


def entries_f32(named):
    return [(k, "F32", v.shape, np.ascontiguousarray(v, dtype="<f4").tobytes()) for k, v in named]


# ---- GPT-2 in float64 -------------------------------------------------------------------------

def gpt2_logits(sd, cfg, tokens):
    """GPT-2's forward from Hugging Face's names and layout: x @ W for a Conv1D (in, out)."""
    B, T = tokens.shape
    C, NH, L = cfg["C"], cfg["NH"], cfg["L"]
    HD = C // NH
    w = {k: v.astype(np.float64) for k, v in sd.items()}
    g = lambda k: w["transformer." + k]  # noqa: E731

    def ln(x, p):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * g(p + ".weight") + g(p + ".bias")

    def gelu_new(x):
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))

    x = g("wte.weight")[tokens] + g("wpe.weight")[:T]
    mask = np.tril(np.ones((T, T), dtype=bool))
    for i in range(L):
        p = f"h.{i}."
        a = ln(x, p + "ln_1")
        qkv = a @ g(p + "attn.c_attn.weight") + g(p + "attn.c_attn.bias")
        q, k, v = (qkv[..., j * C:(j + 1) * C].reshape(B, T, NH, HD).transpose(0, 2, 1, 3)
                   for j in range(3))
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(HD)
        s = np.where(mask, s, -np.inf)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        y = (s @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        x = x + y @ g(p + "attn.c_proj.weight") + g(p + "attn.c_proj.bias")
        m = ln(x, p + "ln_2")
        m = gelu_new(m @ g(p + "mlp.c_fc.weight") + g(p + "mlp.c_fc.bias"))
        x = x + m @ g(p + "mlp.c_proj.weight") + g(p + "mlp.c_proj.bias")
    x = ln(x, "ln_f")
    return x @ g("wte.weight").T


# ---- running ./train ---------------------------------------------------------------------------

def run(*argv):
    p = subprocess.run([str(a) for a in argv], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def one_line(s):
    return len(s.strip().splitlines()) == 1


def main():
    if len(sys.argv) != 3:
        print("usage: test_export.py ./train build/tests/logits_harness", file=sys.stderr)
        return 2
    train, harness = sys.argv[1], sys.argv[2]
    cfg = CFG
    V, C, L, NH, maxT = cfg["V"], cfg["C"], cfg["L"], cfg["NH"], cfg["maxT"]
    t = random_model(cfg, 1234)
    with tempfile.TemporaryDirectory(prefix="seedgpt_export_") as W:
        j = lambda *p: os.path.join(W, *p)  # noqa: E731
        write_llmc(j("model.bin"), cfg, t)

        # ---- export, read back with this file's reader
        rc, out, err = run(train, "export", "--format", "safetensors", j("model.bin"), j("hf"))
        check(rc == 0 and os.path.exists(j("hf", "model.safetensors")), "export_writes_a_folder",
              f"rc {rc}: {(out + err).strip()}")
        if rc != 0:
            return 1
        header, sd, start = read_safetensors(j("hf", "model.safetensors"))
        want = dict(hf_tensors(cfg, t))
        names_ok = set(sd) == set(want)
        shapes_ok = all(names_ok and sd[k].shape == want[k].shape for k in want)
        dtypes_ok = all(v["dtype"] == "F32" for k, v in header.items() if k != "__metadata__")
        check(names_ok and shapes_ok and dtypes_ok and header.get("__metadata__") == {"format": "pt"}
              and start % 8 == 0,
              "export_has_gpt2lmheadmodel_names_shapes_dtypes",
              f"{len(sd)} tensors (expected {len(want)}), missing {sorted(set(want) - set(sd))[:3]}, "
              f"extra {sorted(set(sd) - set(want))[:3]}; shapes {'ok' if shapes_ok else 'differ'}; "
              f"F32 {dtypes_ok}; wte {sd.get('transformer.wte.weight', np.zeros(0)).shape} "
              f"(the {V} real rows of {pad_vocab(V)}); c_attn {sd.get('transformer.h.0.attn.c_attn.weight', np.zeros(0)).shape} "
              f"(Conv1D (in, out)); data starts at byte {start}")
        same = names_ok and all(np.array_equal(sd[k].view(np.uint32), want[k].view(np.uint32)) for k in want)
        check(same, "export_values_are_the_model_file_bit_for_bit",
              "every tensor equals the llm.c tensor (transposed for Conv1D)")
        conf = json.load(open(j("hf", "config.json")))
        expect = {"n_embd": C, "n_head": NH, "n_layer": L, "n_positions": maxT, "vocab_size": V,
                  "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
                  "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
                  "tie_word_embeddings": True}
        bad = {k: conf.get(k) for k in expect if conf.get(k) != expect[k]}
        check(not bad and not os.path.exists(j("hf", "vocab.json")), "export_config_json_is_gpt2s",
              f"fields differing: {bad}; no tokenizer files for vocab {V}")

        # ---- the forward: float64 over the exported tensors vs seedgpt's logits
        rng = np.random.default_rng(7)
        B, T = 2, maxT
        tokens = rng.integers(0, V, size=(B, T)).astype("<i4")
        with open(j("tokens.bin"), "wb") as f:
            f.write(np.array([B, T], dtype="<i4").tobytes() + tokens.tobytes())
        rc, _, err = run(harness, j("model.bin"), j("tokens.bin"), j("logits.bin"))
        seed = np.fromfile(j("logits.bin"), dtype="<f4").astype(np.float64).reshape(B, T, V) if rc == 0 else None
        ref = gpt2_logits(sd, cfg, tokens) if names_ok else None
        rel = (np.linalg.norm(seed - ref) / np.linalg.norm(ref)) if seed is not None and ref is not None else float("inf")
        check(rel < TOL, "exported_gpt2_forward_float64_matches_seedgpt_logits",
              f"relative error {rel:.3g} over {B}x{T}x{V} logits (tolerance {TOL}){'' if rc == 0 else '; harness: ' + err.strip()}")

        # ---- round trips
        rc, out, err = run(train, "import", j("hf"), j("back.bin"))
        same = rc == 0 and open(j("back.bin"), "rb").read() == open(j("model.bin"), "rb").read()
        check(same, "export_then_import_gives_the_file_byte_for_byte", f"rc {rc}: {(out + err).strip()}")

        os.makedirs(j("bare"))
        named = hf_tensors(cfg, t, prefix="")
        named.append(("lm_head.weight", t["wte"][:V]))
        for i in range(L):
            named.append((f"h.{i}.attn.bias", np.tril(np.ones((maxT, maxT), np.float32)).reshape(1, 1, maxT, maxT)))
        write_safetensors(j("bare", "model.safetensors"), entries_f32(named[::-1]))
        rc, out, err = run(train, "import", "--n-head", NH, j("bare", "model.safetensors"), j("bare.bin"))
        same = rc == 0 and open(j("bare.bin"), "rb").read() == open(j("model.bin"), "rb").read()
        check(same, "import_names_without_prefix_with_tied_head_and_masks",
              f"rc {rc}: {(out + err).strip()}")

        # ---- bf16 export: round to nearest even, then widened back by import
        rc, out, err = run(train, "export", "--dtype", "bf16", j("model.bin"), j("hf16"))
        ok = rc == 0
        if ok:
            raw = open(j("hf16", "model.safetensors"), "rb").read()
            n = struct.unpack("<Q", raw[:8])[0]
            h16 = json.loads(raw[8:8 + n])
            ok = all(v["dtype"] == "BF16" for k, v in h16.items() if k != "__metadata__")
            wrong = 0
            for k, x in want.items():
                b, e = h16[k]["data_offsets"]
                got = np.frombuffer(raw[8 + n + b:8 + n + e], dtype="<u2")
                wrong += int((got != bf16_bits(x).ravel()).sum())
            allw = np.concatenate([x.ravel() for x in want.values()])
            ties = int((bf16_bits(allw) != (allw.view("<u4") >> 16)).sum())   # rounded up
            ok = ok and wrong == 0 and json.load(open(j("hf16", "config.json")))["torch_dtype"] == "bfloat16"
        check(ok, "export_bf16_rounds_to_nearest_even",
              f"rc {rc}; {wrong if rc == 0 else '?'} weights differ from round-to-nearest-even "
              f"({ties if rc == 0 else '?'} of them round up){'' if rc == 0 else ': ' + err.strip()}")
        rc, out, err = run(train, "import", j("hf16"), j("back16.bin"))
        ok = rc == 0
        if ok:
            got = read_llmc_floats(j("back16.bin"))
            exp = np.concatenate([widen_bf16(bf16_bits(t[k])).ravel() for k in ORDER])
            ok = np.array_equal(got.view("<u4"), exp.view("<u4"))
        check(ok, "import_of_bf16_export_is_the_widened_values", f"rc {rc} {err.strip()}")

        # ---- F16 and BF16 tensors widened exactly (F16 subnormals included)
        named = hf_tensors(cfg, t)
        h16 = [(k, np.asarray(v, dtype=np.float16)) for k, v in named]
        sub = np.array([6e-8, -6e-8, 3e-6, 6.1e-5, -1e-7, 0.0, -0.0, 65504.0], dtype=np.float16)
        k0, v0 = h16[-1]
        v0 = v0.copy()
        v0[:len(sub)] = sub
        h16[-1] = (k0, v0)
        os.makedirs(j("f16"))
        write_safetensors(j("f16", "model.safetensors"),
                          [(k, "F16", v.shape, v.astype("<f2").tobytes()) for k, v in h16])
        json.dump({"n_head": NH, "n_layer": L, "n_embd": C, "vocab_size": V, "n_positions": maxT},
                  open(j("f16", "config.json"), "w"))
        rc, out, err = run(train, "import", j("f16"), j("f16.bin"))
        ok = rc == 0
        if ok:
            wide = dict((k, v.astype(np.float32)) for k, v in h16)
            exp = {}
            for k in ORDER:
                exp[k] = np.zeros(shapes(cfg)[k], np.float32)
            exp["wte"][:V] = wide["transformer.wte.weight"]
            exp["wpe"] = wide["transformer.wpe.weight"]
            for i in range(L):
                for key, name, conv in BLOCK:
                    x = wide[f"transformer.h.{i}.{key}"]
                    exp[name][i] = x.T if conv else x
            exp["lnfw"], exp["lnfb"] = wide["transformer.ln_f.weight"], wide["transformer.ln_f.bias"]
            e = np.concatenate([exp[k].ravel() for k in ORDER])
            ok = np.array_equal(read_llmc_floats(j("f16.bin")).view("<u4"), e.view("<u4"))
        check(ok, "import_f16_widens_exactly_subnormals_included", f"rc {rc} {err.strip()}")

        named = hf_tensors(cfg, t)
        os.makedirs(j("b16"))
        write_safetensors(j("b16", "model.safetensors"),
                          [(k, "BF16", v.shape, bf16_bits(v).astype("<u2").tobytes()) for k, v in named])
        rc, out, err = run(train, "import", "--n-head", NH, j("b16"), j("b16.bin"))
        exp = np.concatenate([widen_bf16(bf16_bits(t[k])).ravel() for k in ORDER])
        ok = rc == 0 and np.array_equal(read_llmc_floats(j("b16.bin")).view("<u4"), exp.view("<u4"))
        check(ok, "import_bf16_widens_exactly", f"rc {rc} {err.strip()}")

        # ---- llm.c's bf16 model file (version 5): loads, widened exactly
        write_llmc(j("v5.bin"), cfg, t, version=5)
        tw = {k: widen_bf16(bf16_bits(t[k])).reshape(t[k].shape) for k in ORDER}
        write_llmc(j("v5wide.bin"), cfg, tw)
        r1 = run(harness, j("v5.bin"), j("tokens.bin"), j("l5.bin"))
        r2 = run(harness, j("v5wide.bin"), j("tokens.bin"), j("l5w.bin"))
        ok = r1[0] == 0 and r2[0] == 0 and open(j("l5.bin"), "rb").read() == open(j("l5w.bin"), "rb").read()
        check(ok, "llmc_bf16_model_file_v5_loads_widened_exactly",
              f"logits of the version-5 file {'equal' if ok else 'differ from'} those of the fp32 "
              f"file of its widened weights, bit for bit {r1[2].strip()} {r2[2].strip()}")
        rc, out, err = run(train, "export", j("v5.bin"), j("hf5"))
        ok = rc == 0
        if ok:
            _, sd5, _ = read_safetensors(j("hf5", "model.safetensors"))
            ok = np.array_equal(sd5["transformer.h.1.mlp.c_fc.weight"], tw["fcw"][1].T)
        check(ok, "export_reads_llmc_bf16_model_file", f"rc {rc} {err.strip()}")

        # ---- GPT-2's vocabulary: tokenizer files
        big = dict(cfg, V=50257, C=8, NH=2, L=1, maxT=8)
        write_llmc(j("big.bin"), big, random_model(big, 5))
        os.makedirs(j("bpe"))
        open(j("bpe", "encoder.json"), "w").write('{"!": 0}\n')
        open(j("bpe", "vocab.bpe"), "w").write("#version: 0.2\n")
        rc, out, err = run(train, "export", "--bpe-dir", j("bpe"), j("big.bin"), j("hfbig"))
        ok = rc == 0 and all(os.path.exists(j("hfbig", f)) for f in ("vocab.json", "merges.txt", "tokenizer_config.json"))
        ok = ok and open(j("hfbig", "vocab.json")).read() == '{"!": 0}\n' and \
            open(j("hfbig", "merges.txt")).read() == "#version: 0.2\n" and \
            json.load(open(j("hfbig", "tokenizer_config.json")))["eos_token"] == "<|endoftext|>" and \
            json.load(open(j("hfbig", "config.json")))["eos_token_id"] == 50256
        check(ok, "export_gpt2_vocab_writes_tokenizer_files", f"rc {rc}: {(out + err).strip()}")
        rc, out, err = run(train, "export", "--bpe-dir", j("nothing"), j("big.bin"), j("hfnone"))
        check(rc == 2 and one_line(err) and "--bpe-dir" in err and not os.path.exists(j("hfnone")),
              "export_gpt2_vocab_without_bpe_files_refused", f"rc {rc}: {err.strip()}")
        os.makedirs(j("self"))
        for f in ("vocab.json", "merges.txt"):
            open(j("self", f), "w").write("keep\n")
        rc, out, err = run(train, "export", "--bpe-dir", j("self"), j("big.bin"), j("self"))
        kept = all(open(j("self", f)).read() == "keep\n" for f in ("vocab.json", "merges.txt"))
        check(rc == 2 and one_line(err) and kept and not os.path.exists(j("self", "model.safetensors")),
              "export_refuses_writing_over_its_tokenizer_inputs", f"rc {rc}: {err.strip()}")

        # ---- a model GPT-2 cannot express
        gqa = dict(cfg, NKV=2)
        write_llmc(j("gqa.bin"), gqa, random_model(gqa, 3), version=1, magic=0x44454553, extra={8: 2})
        rc, out, err = run(train, "export", j("gqa.bin"), j("hfgqa"))
        check(rc == 2 and one_line(err) and "grouped-query" in err and not os.path.exists(j("hfgqa")),
              "export_refuses_grouped_query_heads_naming_them", f"rc {rc}: {err.strip()}")

        # ---- bad safetensors: one line, exit 2, nothing written
        good = entries_f32(hf_tensors(cfg, t))
        cases = {}
        os.makedirs(j("bad"))

        def bad_case(name, word, **kw):
            path = j("bad", name + ".safetensors")
            write_safetensors(path, kw.pop("entries", good), **kw)
            cases[name] = (path, word)

        bad_case("truncated", "run past", cut=10)
        raw = open(j("hf", "model.safetensors"), "rb").read()
        path = j("bad", "header_past_end.safetensors")
        open(path, "wb").write(struct.pack("<Q", len(raw)) + raw[8:])
        cases["header_past_end"] = (path, "truncated")
        # the last tensor moved one byte back, and the file one byte shorter: a one-byte overlap
        hdr = {}
        at = 0
        for k, dt, s, b in good:
            hdr[k] = {"dtype": dt, "shape": list(s), "data_offsets": [at, at + len(b)]}
            at += len(b)
        last = good[-1][0]
        ov = json.loads(json.dumps(hdr))
        ov[last]["data_offsets"] = [x - 1 for x in ov[last]["data_offsets"]]
        bad_case("overlap_one_byte", "overlap", header_override=json.dumps(ov).encode(), cut=1)
        past = json.loads(json.dumps(hdr))
        past[last]["data_offsets"] = [x + 4 for x in past[last]["data_offsets"]]
        bad_case("offsets_past_end", "run past", header_override=json.dumps(past).encode())
        wd = json.loads(json.dumps(hdr))
        wd["transformer.h.0.attn.c_proj.weight"]["dtype"] = "I32"
        bad_case("wrong_dtype", "dtype I32", header_override=json.dumps(wd).encode())
        ud = json.loads(json.dumps(hdr))
        ud["transformer.h.0.attn.c_proj.weight"]["dtype"] = "F17"
        bad_case("unknown_dtype", "unknown dtype", header_override=json.dumps(ud).encode())
        # a weight missing, its bytes taken by a mask-buffer name that import ignores
        miss = [(("transformer.h.1.attn.bias" if k == "transformer.h.1.mlp.c_fc.bias" else k), dt, s, b)
                for k, dt, s, b in good]
        bad_case("missing_tensor", "missing tensor transformer.h.1.mlp.c_fc.bias", entries=miss)
        bad_case("bad_json", "bad header JSON", header_override=b'{"transformer.wte.weight": [1, ')
        bad_case("not_an_object", "not a JSON object", header_override=b"[]      ")
        untied = good + [("lm_head.weight", "F32", (V, C), (t["wte"][:V] * 2).astype("<f4").tobytes())]
        bad_case("untied_head", "untied", entries=untied)
        for name, (path, word) in cases.items():
            outp = j("bad", name + ".bin")
            rc, out, err = run(train, "import", "--n-head", NH, path, outp)
            check(rc == 2 and one_line(err) and word in err and path in err and not os.path.exists(outp)
                  and not os.path.exists(outp + ".tmp"),
                  f"import_refuses_{name}", f"rc {rc}: {err.strip()}")
        before = open(j("hf", "model.safetensors"), "rb").read()
        rc, out, err = run(train, "import", j("hf", "model.safetensors"), j("hf", "model.safetensors"))
        check(rc == 2 and one_line(err) and open(j("hf", "model.safetensors"), "rb").read() == before,
              "import_refuses_writing_over_its_input", f"rc {rc}: {err.strip()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
