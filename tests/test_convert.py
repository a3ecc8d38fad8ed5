#!/usr/bin/env python3
"""tests/test_convert.py — tools/gpt2_convert.py: PyTorch GPT-2 weights <-> llm.c model files.

    python3 tests/test_convert.py build/tests/oracle_harness

A randomly initialised GPT-2 (nanoGPT's parameter names; L 2, NH 4, C 64, maxT 32, V 300, so the
file pads wte to Vp 384) is saved as a nanoGPT checkpoint (keys with torch.compile's "_orig_mod."
prefix) and converted:
  - to-llmc: the header is read back here (numpy, not the tool's reader) and must hold
    maxT V L NH C Vp = 32 300 2 4 64 384 and the file size 1024 + 4 P;
  - to-torch: every tensor comes back bit for bit (torch.equal), lm_head shares wte;
  - llm.c -> torch -> llm.c: the same file byte for byte;
  - the Hugging Face layout (this test transposes the four linear weights itself, adds the
    attn.bias mask buffers), as a .pt and as a model folder (model.safetensors written here, with
    config.json giving n_head): the same llm.c file byte for byte; and to-torch --format hf gives
    that state dict back bit for bit;
  - loss: seedgpt (tests/oracle_harness.c on the converted file) and a GPT-2 forward written here
    in torch on the original state dict agree on the mean cross-entropy of a random batch to 1e-5
    (relative; both fp32, differing only in summation order: ~1e-7 expected, while a mapping slip
    such as a transposed or swapped tensor moves a random model's loss by far more than 1e-3);
  - padded vocab: a 320-row wte with --vocab 300 gives V 300, Vp 384 and zero rows 300..383;
  - nanoGPT's bias=False (no bias at all) gives the file of explicit zero biases;
  - refusals: bad magic, seedgpt's own format, truncation, an untied LM head, a missing tensor,
    one missing bias, --n-head not dividing C: exit status 2 and one line naming the problem;
    to-torch --format hf onto an existing file and to-llmc of a model holding a NaN likewise, on
    the command line (no traceback), writing nothing.
Output lines "ok   name: ...", "FAIL name: ...", "SKIP name: why" (tests/run.sh counts them).
"""
import contextlib
import io
import json
import math
import os
import re
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except Exception as e:  # noqa: BLE001 - any import failure means "no torch here"
    print(f"SKIP gpt2_convert_roundtrip: cannot import torch and numpy with {sys.executable} ({e})")
    sys.exit(0)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools"))
sys.dont_write_bytecode = True   # no tools/__pycache__ in the working tree
import gpt2_convert  # noqa: E402

TOL = 1e-5
failed = 0


def check(cond, name, msg):
    global failed
    print(f"{'ok  ' if cond else 'FAIL'} {name}: {msg}", flush=True)
    if not cond:
        failed += 1


def run_tool(*argv):
    """The tool in this process: (exit status, stdout + stderr)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            rc = gpt2_convert.main([str(a) for a in argv])
        except SystemExit as e:   # argparse
            rc = e.code
    return rc, out.getvalue().strip()


# ---- a random GPT-2 in nanoGPT's naming ----------------------------------------------------------

CFG = {"L": 2, "NH": 4, "C": 64, "maxT": 32, "V": 300}


def random_state_dict(cfg, seed, rows=None):
    g = torch.Generator().manual_seed(seed)
    C, L = cfg["C"], cfg["L"]
    r = lambda *s, scale=0.15: scale * torch.randn(*s, generator=g)   # noqa: E731
    sd = {"transformer.wte.weight": r(rows or cfg["V"], C, scale=0.1),
          "transformer.wpe.weight": r(cfg["maxT"], C, scale=0.1)}
    for i in range(L):
        h = f"transformer.h.{i}."
        sd[h + "ln_1.weight"] = 1.0 + r(C, scale=0.1)
        sd[h + "ln_1.bias"] = r(C, scale=0.05)
        sd[h + "attn.c_attn.weight"] = r(3 * C, C)
        sd[h + "attn.c_attn.bias"] = r(3 * C, scale=0.05)
        sd[h + "attn.c_proj.weight"] = r(C, C)
        sd[h + "attn.c_proj.bias"] = r(C, scale=0.05)
        sd[h + "ln_2.weight"] = 1.0 + r(C, scale=0.1)
        sd[h + "ln_2.bias"] = r(C, scale=0.05)
        sd[h + "mlp.c_fc.weight"] = r(4 * C, C)
        sd[h + "mlp.c_fc.bias"] = r(4 * C, scale=0.05)
        sd[h + "mlp.c_proj.weight"] = r(C, 4 * C)
        sd[h + "mlp.c_proj.bias"] = r(C, scale=0.05)
    sd["transformer.ln_f.weight"] = 1.0 + r(C, scale=0.1)
    sd["transformer.ln_f.bias"] = r(C, scale=0.05)
    sd["lm_head.weight"] = sd["transformer.wte.weight"]   # tied, as nanoGPT's GPT
    return sd


def gpt2_loss(sd, cfg, idx, targets):
    """GPT-2's forward, written from nanoGPT's key names: mean cross-entropy over B*T."""
    B, T = idx.shape
    C, NH = cfg["C"], cfg["NH"]
    HD = C // NH
    w = lambda k: sd["transformer." + k]   # noqa: E731
    x = w("wte.weight")[idx] + w("wpe.weight")[:T]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(cfg["L"]):
        h = lambda k: w(f"h.{i}.{k}")   # noqa: E731
        a = F.layer_norm(x, (C,), h("ln_1.weight"), h("ln_1.bias"), 1e-5)
        q, k, v = F.linear(a, h("attn.c_attn.weight"), h("attn.c_attn.bias")).split(C, dim=2)
        q, k, v = (t.view(B, T, NH, HD).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HD)
        att = F.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, h("attn.c_proj.weight"), h("attn.c_proj.bias"))
        m = F.layer_norm(x, (C,), h("ln_2.weight"), h("ln_2.bias"), 1e-5)
        m = F.gelu(F.linear(m, h("mlp.c_fc.weight"), h("mlp.c_fc.bias")), approximate="tanh")
        x = x + F.linear(m, h("mlp.c_proj.weight"), h("mlp.c_proj.bias"))
    x = F.layer_norm(x, (C,), w("ln_f.weight"), w("ln_f.bias"), 1e-5)
    logits = x @ sd["lm_head.weight"].t()
    return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T)).item()


def to_hf(sd):
    """nanoGPT naming -> Hugging Face GPT2LMHeadModel: Conv1D weights (in, out), mask buffers."""
    out = {}
    for k, v in sd.items():
        if k.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
            v = v.t().contiguous()
        out[k] = v
    T = CFG["maxT"]
    for i in range(CFG["L"]):
        out[f"transformer.h.{i}.attn.bias"] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
        out[f"transformer.h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    out["lm_head.weight"] = out["transformer.wte.weight"]
    return out


def write_safetensors(path, sd):
    """The safetensors layout, written here: u64 header length, JSON header, raw F32 data."""
    header, blobs, at = {}, [], 0
    for k, v in sd.items():
        b = v.detach().contiguous().numpy().astype("<f4").tobytes()
        header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


MASKS = re.compile(r"\.attn\.(bias|masked_bias)$")   # Hugging Face's causal-mask buffers


def same_state(a, b, keys=None):
    keys = keys or sorted(a)
    bad = [k for k in keys if k not in b or a[k].dtype != b[k].dtype or not torch.equal(a[k], b[k])]
    return bad


def main():
    if len(sys.argv) != 2:
        print("usage: test_convert.py PATH/TO/oracle_harness", file=sys.stderr)
        return 2
    harness = sys.argv[1]
    torch.set_num_threads(2)
    cfg = CFG
    sd = random_state_dict(cfg, 1234)
    C, L, V, maxT, NH = cfg["C"], cfg["L"], cfg["V"], cfg["maxT"], cfg["NH"]
    Vp = 384
    P = Vp * C + maxT * C + L * (2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C
                                 + 4 * C * C + C) + 2 * C

    with tempfile.TemporaryDirectory(prefix="seedgpt_convert_") as W:
        j = lambda *p: os.path.join(W, *p)   # noqa: E731
        # nanoGPT checkpoint, compiled-model key prefix
        ckpt = {"model": {"_orig_mod." + k: v for k, v in sd.items()},
                "model_args": {"n_layer": L, "n_head": NH, "n_embd": C, "block_size": maxT,
                               "bias": True, "vocab_size": V, "dropout": 0.0},
                "iter_num": 7, "best_val_loss": torch.tensor(3.5)}
        torch.save(ckpt, j("ckpt.pt"))

        rc, msg = run_tool("to-llmc", j("ckpt.pt"), j("model.bin"))
        ok = rc == 0 and os.path.exists(j("model.bin"))
        header = np.fromfile(j("model.bin"), dtype="<i4", count=256) if ok else np.zeros(256, "<i4")
        size = os.path.getsize(j("model.bin")) if ok else -1
        want = [20240326, 3, maxT, V, L, NH, C, Vp]
        check(ok and list(header[:8]) == want and not header[8:].any() and size == 1024 + 4 * P,
              "to_llmc_writes_llmc_header_and_size",
              f"rc {rc}; header {list(header[:8])} (expected {want}), {size} bytes (expected "
              f"{1024 + 4 * P}); {msg.splitlines()[-1] if msg else ''}")

        # wte rows: the V real rows, then zeros
        flat = np.fromfile(j("model.bin"), dtype="<f4", offset=1024)
        wte_file = flat[:Vp * C].reshape(Vp, C)
        check(np.array_equal(wte_file[:V], sd["transformer.wte.weight"].numpy()) and
              not wte_file[V:].any(), "to_llmc_wte_rows_then_zero_padding",
              f"rows 0..{V - 1} equal {np.array_equal(wte_file[:V], sd['transformer.wte.weight'].numpy())}, "
              f"max |rows {V}..{Vp - 1}| = {np.abs(wte_file[V:]).max()}")

        # back to torch: bit for bit
        rc, msg = run_tool("to-torch", j("model.bin"), j("back.pt"))
        back = torch.load(j("back.pt"), map_location="cpu") if rc == 0 else {"model": {}}
        bad = same_state(sd, back["model"])
        tied = rc == 0 and back["model"]["lm_head.weight"].data_ptr() == \
            back["model"]["transformer.wte.weight"].data_ptr()
        args_ok = back.get("model_args", {}) == ckpt["model_args"]
        check(rc == 0 and not bad and set(back["model"]) == set(sd) and tied and args_ok,
              "to_torch_roundtrip_is_bit_for_bit",
              f"rc {rc}; {len(sd) - len(bad)} of {len(sd)} tensors identical{' (differ: ' + ', '.join(bad[:3]) + ')' if bad else ''}; "
              f"lm_head shares wte {tied}; model_args equal {args_ok}")

        rc2, _ = run_tool("to-llmc", j("back.pt"), j("model2.bin"))
        same_file = rc2 == 0 and open(j("model.bin"), "rb").read() == open(j("model2.bin"), "rb").read()
        check(same_file, "llmc_to_torch_to_llmc_is_byte_for_byte", f"rc {rc2}, files identical {same_file}")

        # Hugging Face layout: .pt, and a folder with model.safetensors + config.json
        hf = to_hf(sd)
        torch.save(hf, j("hf.pt"))
        rc3, msg3 = run_tool("to-llmc", j("hf.pt"), j("model_hf.bin"), "--n-head", NH)
        os.makedirs(j("hf_folder"))
        write_safetensors(j("hf_folder", "model.safetensors"),
                          {k: v for k, v in hf.items() if not MASKS.search(k)})
        with open(j("hf_folder", "config.json"), "w") as f:
            json.dump({"n_head": NH, "n_embd": C, "n_layer": L}, f)
        rc4, msg4 = run_tool("to-llmc", j("hf_folder"), j("model_st.bin"))
        base = open(j("model.bin"), "rb").read()
        eq3 = rc3 == 0 and open(j("model_hf.bin"), "rb").read() == base
        eq4 = rc4 == 0 and open(j("model_st.bin"), "rb").read() == base
        check(eq3 and eq4, "hugging_face_layout_converts_to_the_same_file",
              f"HF .pt: rc {rc3}, identical {eq3}; safetensors folder: rc {rc4}, identical {eq4}"
              f"{'; ' + msg3.splitlines()[-1] if rc3 else ''}{'; ' + msg4.splitlines()[-1] if rc4 else ''}")

        rc5, msg5 = run_tool("to-torch", j("model.bin"), j("hf_out"), "--format", "hf")
        hb = torch.load(j("hf_out", "pytorch_model.bin"), map_location="cpu") if rc5 == 0 else {}
        keys = [k for k in hf if not MASKS.search(k)]
        bad = same_state(hf, hb, keys)
        try:
            hcfg = json.load(open(j("hf_out", "config.json")))
        except (OSError, ValueError):
            hcfg = {}
        cfg_ok = (hcfg.get("n_head"), hcfg.get("n_layer"), hcfg.get("n_embd"), hcfg.get("vocab_size"),
                  hcfg.get("n_positions"), hcfg.get("activation_function")) == (NH, L, C, V, maxT, "gelu_new")
        check(rc5 == 0 and not bad and set(hb) == set(keys) and cfg_ok,
              "to_torch_hf_gives_the_hugging_face_state_dict_bit_for_bit",
              f"rc {rc5}; {len(keys) - len(bad)} of {len(keys)} tensors identical; config.json as expected {cfg_ok}")

        # the converted model's loss in seedgpt equals torch's
        B, T = 3, 16
        g = torch.Generator().manual_seed(99)
        idx = torch.randint(0, V, (B, T), generator=g)
        tgt = torch.randint(0, V, (B, T), generator=g)
        with torch.no_grad():
            t_loss = gpt2_loss(sd, cfg, idx, tgt)
        with open(j("batch.bin"), "wb") as f:
            f.write(np.array([B, T], dtype="<i4").tobytes())
            f.write(idx.numpy().astype("<i4").tobytes())
            f.write(tgt.numpy().astype("<i4").tobytes())
            f.write(np.array([1e-3, 0.9, 0.95, 1e-8, 0.0, 1.0], dtype="<f4").tobytes())
            f.write(np.array([0], dtype="<i4").tobytes())
        if not os.access(harness, os.X_OK):
            check(False, "converted_model_loss_matches_torch", f"{harness} is not an executable")
        else:
            r = subprocess.run([harness, j("model.bin"), j("batch.bin"), j("out.bin")],
                               capture_output=True, text=True, timeout=120)
            c_loss = float(np.fromfile(j("out.bin"), dtype="<f4", count=1)[0]) if r.returncode == 0 else float("nan")
            e = abs(c_loss - t_loss) / abs(t_loss)
            check(r.returncode == 0 and e < TOL, "converted_model_loss_matches_torch",
                  f"seedgpt {c_loss:.7f} torch {t_loss:.7f} rel {e:.1e} (tol {TOL:.0e}); "
                  f"uniform would be {math.log(V):.4f}{'; ' + r.stderr.strip() if r.returncode else ''}")

        # padded vocab rows dropped with --vocab
        sd_pad = random_state_dict(cfg, 777, rows=320)
        torch.save(sd_pad, j("pad.pt"))
        rc6, msg6 = run_tool("to-llmc", j("pad.pt"), j("pad.bin"), "--vocab", V, "--n-head", NH)
        h6 = np.fromfile(j("pad.bin"), dtype="<i4", count=8) if rc6 == 0 else np.zeros(8, "<i4")
        w6 = np.fromfile(j("pad.bin"), dtype="<f4", offset=1024, count=Vp * C).reshape(Vp, C) if rc6 == 0 else None
        ok6 = rc6 == 0 and h6[3] == V and h6[7] == Vp and not w6[V:].any() and \
            np.array_equal(w6[:V], sd_pad["transformer.wte.weight"][:V].numpy())
        check(ok6, "to_llmc_vocab_drops_padded_rows",
              f"rc {rc6}; V {h6[3]} Vp {h6[7]}; {msg6.splitlines()[0] if msg6 else ''}")

        # nanoGPT bias=False: no bias anywhere converts as zero biases
        nb = {k: v for k, v in sd.items() if not k.endswith(".bias")}
        zb = {k: (torch.zeros_like(v) if k.endswith(".bias") else v) for k, v in sd.items()}
        torch.save(nb, j("nb.pt"))
        torch.save(zb, j("zb.pt"))
        rc7, msg7 = run_tool("to-llmc", j("nb.pt"), j("nb.bin"), "--n-head", NH)
        rc8, _ = run_tool("to-llmc", j("zb.pt"), j("zb.bin"), "--n-head", NH)
        eq7 = rc7 == 0 and rc8 == 0 and open(j("nb.bin"), "rb").read() == open(j("zb.bin"), "rb").read()
        check(eq7, "bias_free_model_converts_as_zero_biases",
              f"rc {rc7} / {rc8}, same file as explicit zero biases {eq7}{'; ' + msg7 if rc7 else ''}")

        # refusals: exit 2, one line naming the problem
        cases = []
        with open(j("bad_magic.bin"), "wb") as f:
            f.write(np.array([12345] + [0] * 255, dtype="<i4").tobytes())
        cases.append(("bad magic", ("to-torch", j("bad_magic.bin"), j("x.pt")), "magic 12345"))
        seed = bytearray(base)
        seed[0:4] = (0x44454553).to_bytes(4, "little")
        open(j("seed.bin"), "wb").write(seed)
        cases.append(("seedgpt format", ("to-torch", j("seed.bin"), j("x.pt")), "seedgpt-format"))
        open(j("short.bin"), "wb").write(base[:-4])
        cases.append(("truncated", ("to-torch", j("short.bin"), j("x.pt")), "truncated"))
        untied = dict(sd)
        untied["lm_head.weight"] = sd["lm_head.weight"] + 1.0
        torch.save(untied, j("untied.pt"))
        cases.append(("untied head", ("to-llmc", j("untied.pt"), j("x.bin"), "--n-head", NH), "not tied"))
        missing = {k: v for k, v in sd.items() if k != "transformer.h.1.mlp.c_fc.weight"}
        torch.save(missing, j("missing.pt"))
        cases.append(("missing", ("to-llmc", j("missing.pt"), j("x.bin"), "--n-head", NH), "h.1.mlp.c_fc.weight"))
        nobias = {k: v for k, v in sd.items() if k != "transformer.h.0.attn.c_attn.bias"}
        torch.save(nobias, j("nobias.pt"))
        cases.append(("one bias missing", ("to-llmc", j("nobias.pt"), j("x.bin"), "--n-head", NH), "no h.0.attn.c_attn.bias"))
        cases.append(("heads", ("to-llmc", j("ckpt.pt"), j("x.bin"), "--n-head", 5), "does not divide"))
        bad = []
        for what, argv, needle in cases:
            rc, msg = run_tool(*argv)
            if rc != 2 or needle not in msg or len(msg.splitlines()) != 1 or os.path.exists(argv[2]):
                bad.append(f"{what}: rc {rc} \"{msg}\"")
        check(not bad, "converter_refuses_bad_inputs_with_one_line",
              f"{len(cases) - len(bad)} of {len(cases)} refused as expected" + ("; " + "; ".join(bad) if bad else ""))

        # the outputs: to-torch --format hf onto an existing file, and to-llmc of a model holding
        # a NaN, each one line and exit 2 on the command line (no traceback), nothing written
        open(j("taken.pt"), "wb").write(b"a file that is not a folder")
        tool = [sys.executable, os.path.join(REPO, "tools", "gpt2_convert.py")]
        r = subprocess.run(tool + ["to-torch", "--format", "hf", j("model.bin"), j("taken.pt")],
                           capture_output=True, text=True, timeout=120)
        kept = open(j("taken.pt"), "rb").read() == b"a file that is not a folder"
        check(r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "not a folder" in r.stderr and kept,
              "converter_to_torch_hf_onto_a_file_is_one_line",
              f"exit {r.returncode}, file kept {kept}: {r.stderr.strip()[:300]}")
        nan_sd = dict(sd)
        w = sd["transformer.h.1.mlp.c_fc.weight"].clone()
        w[3, 5] = float("nan")
        nan_sd["transformer.h.1.mlp.c_fc.weight"] = w
        torch.save(nan_sd, j("nan.pt"))
        r = subprocess.run(tool + ["to-llmc", j("nan.pt"), j("nan.bin"), "--n-head", str(NH)],
                           capture_output=True, text=True, timeout=120)
        check(r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "fcw" in r.stderr and
              "non-finite" in r.stderr and not os.path.exists(j("nan.bin")),
              "converter_refuses_to_write_a_nan_model",
              f"exit {r.returncode}, nan.bin written {os.path.exists(j('nan.bin'))}: {r.stderr.strip()[:300]}")

        # the command line itself (one subprocess: the in-process calls above cover the rest)
        r = subprocess.run([sys.executable, os.path.join(REPO, "tools", "gpt2_convert.py"), "to-torch",
                            j("bad_magic.bin"), j("y.pt")], capture_output=True, text=True, timeout=120)
        check(r.returncode == 2 and r.stderr.startswith("gpt2_convert: ") and not os.path.exists(j("y.pt")),
              "converter_command_line_exits_2_with_a_message",
              f"exit {r.returncode}: {r.stderr.strip()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
