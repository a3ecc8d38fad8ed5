#!/usr/bin/env python3
"""tools/gpt2_convert.py — GPT-2 weights between PyTorch (nanoGPT, Hugging Face) and llm.c's fp32
model file, the file ./train reads with --init and writes with --save (docs/formats.md).

    python3 tools/gpt2_convert.py to-llmc IN OUT.bin [--n-head N] [--vocab V]
    python3 tools/gpt2_convert.py to-torch IN.bin OUT [--format nanogpt|hf]

to-llmc reads IN, any of:
  - a nanoGPT checkpoint (ckpt.pt: {"model": state dict, "model_args": {...}}) or a bare state dict
    of nanoGPT's GPT (nn.Linear weights, (out, in));
  - a Hugging Face GPT-2 state dict (GPT2LMHeadModel or GPT2Model: Conv1D weights, (in, out), which
    are transposed here), as a .pt/.bin file, a .safetensors file, or a model folder
    (pytorch_model.bin or model.safetensors, with config.json);
  keys may carry the prefixes "_orig_mod." (torch.compile), "module." (DDP) and "transformer.".
  .pt/.bin files are unpickled by torch.load: convert only files you trust (.safetensors are
  read as plain data). The layout is told by c_attn's weight: (3C, C) nanoGPT, (C, 3C) Hugging Face. The LM head must be
  tied to wte (or absent); a model without any bias (nanoGPT's bias=False) gets zero biases, which
  compute the same model. fp16/bf16 weights are widened to fp32 exactly.
  --n-head N   attention heads; the weights do not say. Default: the checkpoint's model_args, else
               config.json, else GPT-2's own (C 768: 12, 1024: 16, 1280: 20, 1600: 25).
  --vocab V    the real vocabulary when wte has padded rows (nanoGPT's 50304 -> --vocab 50257):
               rows V.. are dropped (llm.c files hold them as zeros). Default: every row is real.
  The file's padded vocabulary Vp is V rounded up to a multiple of 128 (llm.c: 50257 -> 50304).

to-torch writes OUT:
  --format nanogpt (default): a nanoGPT checkpoint {"model": ..., "model_args": ...}, which
               nanoGPT's sample.py loads (wte with the V real rows; lm_head.weight shares it);
  --format hf:  OUT a folder: pytorch_model.bin (GPT2LMHeadModel's keys, Conv1D layout) and
               config.json, for GPT2LMHeadModel.from_pretrained(OUT).
  Only llm.c-format files (magic 20240326, version 3: plain GPT-2) convert; seedgpt's own format
  (grouped-query heads) has no nanoGPT or Hugging Face counterpart, and llm.c's bf16 files
  (version 5) are not read.

fp32 in, fp32 out: to-llmc then to-torch gives back every tensor bit for bit, and to-torch then
to-llmc the same file byte for byte (tests/test_convert.py). Files are written to NAME.tmp and
renamed into place; OUT is never IN, and --format hf writes a folder, never over a file.
to-llmc refuses a model holding a NaN or an infinity (./train would refuse to load it): nothing
is written. Errors: one line on stderr, exit status 2.
"""
import argparse
import json
import os
import re
import sys

import numpy as np
import torch

LLMC_MAGIC, LLMC_VERSION = 20240326, 3
SEED_MAGIC = 0x44454553
GPT2_HEADS = {768: 12, 1024: 16, 1280: 20, 1600: 25}   # GPT-2 small, medium, large, XL
# llm.c's tensor order (docs/formats.md) and each one's name inside a block (None: not per layer)
LLMC_ORDER = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w",
              "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
BLOCK_KEYS = {  # llm.c name -> nanoGPT / Hugging Face key inside block i (h.{i}.)
    "ln1w": "ln_1.weight", "ln1b": "ln_1.bias", "qkvw": "attn.c_attn.weight",
    "qkvb": "attn.c_attn.bias", "attprojw": "attn.c_proj.weight", "attprojb": "attn.c_proj.bias",
    "ln2w": "ln_2.weight", "ln2b": "ln_2.bias", "fcw": "mlp.c_fc.weight", "fcb": "mlp.c_fc.bias",
    "fcprojw": "mlp.c_proj.weight", "fcprojb": "mlp.c_proj.bias",
}
LINEAR_WEIGHTS = {"qkvw", "attprojw", "fcw", "fcprojw"}   # Conv1D in Hugging Face: (in, out)


class ConvertError(Exception):
    """One line for the user; main prints it and exits 2."""


# ---- reading PyTorch-side weights ----------------------------------------------------------------

def read_safetensors(path):
    """A .safetensors file -> {name: float32 tensor}. The format: u64 header length, a JSON header
    {name: {dtype, shape, data_offsets}}, then the raw little-endian data."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ConvertError(f"{path}: too short for a safetensors file")
    n = int.from_bytes(raw[:8], "little")
    try:
        header = json.loads(raw[8:8 + n])
    except ValueError as e:
        raise ConvertError(f"{path}: bad safetensors header ({e})")
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = data[a:b]
        dt = info["dtype"]
        if dt == "F32":
            arr = np.frombuffer(buf, dtype="<f4").copy()
        elif dt == "F16":
            arr = np.frombuffer(buf, dtype="<f2").astype(np.float32)
        elif dt == "BF16":
            arr = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif dt in ("BOOL", "U8", "I8", "I32", "I64"):
            continue   # buffers such as attn.bias masks
        else:
            raise ConvertError(f"{path}: tensor {name} has dtype {dt} (expected F32, F16 or BF16)")
        out[name] = torch.from_numpy(arr.reshape(info["shape"]))
    return out


def load_torch(path):
    # A full unpickle (nanoGPT checkpoints hold floats and dicts that torch 1.13's weights_only
    # loader refuses), as nanoGPT and Hugging Face load them: convert only files you trust.
    kw = {"weights_only": False} if "weights_only" in torch.load.__code__.co_varnames else {}
    try:
        return torch.load(path, map_location="cpu", **kw)
    except Exception as e:  # noqa: BLE001 - any unpickling failure is reported the same way
        raise ConvertError(f"{path}: torch.load cannot read it: {str(e).splitlines()[0] if str(e) else type(e).__name__}")


def read_input(path):
    """IN -> (state dict, hints {n_head, block_size, vocab_size} from model_args/config.json)."""
    hints = {}
    config = None
    if os.path.isdir(path):
        config = os.path.join(path, "config.json")
        for name in ("model.safetensors", "pytorch_model.bin"):
            if os.path.exists(os.path.join(path, name)):
                path = os.path.join(path, name)
                break
        else:
            raise ConvertError(f"{path}: a folder without model.safetensors or pytorch_model.bin")
    elif os.path.exists(os.path.join(os.path.dirname(path) or ".", "config.json")):
        config = os.path.join(os.path.dirname(path) or ".", "config.json")
    if not os.path.exists(path):
        raise ConvertError(f"{path}: no such file")
    if path.endswith(".safetensors"):
        obj = read_safetensors(path)
    else:
        obj = load_torch(path)
    if isinstance(obj, dict) and "model" in obj and isinstance(obj["model"], dict):
        args = obj.get("model_args") or {}
        hints.update({k: args[k] for k in ("n_head", "block_size", "vocab_size") if k in args})
        obj = obj["model"]
    if not isinstance(obj, dict) or not all(torch.is_tensor(v) for v in obj.values()):
        raise ConvertError(f"{path}: not a state dict or a nanoGPT checkpoint")
    if config and "n_head" not in hints:
        try:
            with open(config) as f:
                cfg = json.load(f)
            if "n_head" in cfg:
                hints["n_head"] = int(cfg["n_head"])
        except (OSError, ValueError):
            pass
    return obj, hints


def normalise_keys(sd, path):
    out = {}
    for k, v in sd.items():
        nk = k
        for prefix in ("_orig_mod.", "module.", "transformer."):
            if nk.startswith(prefix):
                nk = nk[len(prefix):]
        if nk in out:
            raise ConvertError(f"{path}: key {k} appears twice once prefixes are removed")
        out[nk] = v
    return out


def to_llmc(args):
    check_output(args, False)
    sd, hints = read_input(args.input)
    sd = normalise_keys(sd, args.input)
    for need in ("wte.weight", "wpe.weight", "ln_f.weight"):
        if need not in sd:
            raise ConvertError(f"{args.input}: no {need}: not a GPT-2 state dict "
                               f"(keys: {', '.join(sorted(sd)[:6])}, ...)")
    f32 = lambda t: t.detach().to(torch.float32).contiguous()   # noqa: E731 - exact widening
    wte, wpe = f32(sd["wte.weight"]), f32(sd["wpe.weight"])
    rows, C = wte.shape
    maxT = wpe.shape[0]
    L = 0
    while f"h.{L}.ln_1.weight" in sd:
        L += 1
    if L == 0:
        raise ConvertError(f"{args.input}: no transformer blocks (h.0.ln_1.weight)")

    # which layout: nanoGPT's nn.Linear (3C, C) or Hugging Face's Conv1D (C, 3C)
    qshape = tuple(sd["h.0.attn.c_attn.weight"].shape)
    if qshape == (3 * C, C):
        conv1d = False
    elif qshape == (C, 3 * C):
        conv1d = True
    else:
        raise ConvertError(f"{args.input}: h.0.attn.c_attn.weight has shape {qshape}, expected "
                           f"({3 * C}, {C}) or ({C}, {3 * C}) for C = {C}")

    NH = args.n_head or hints.get("n_head")
    if not NH:
        NH = GPT2_HEADS.get(C)
        if not NH:
            raise ConvertError(f"{args.input}: C = {C} is not a GPT-2 size; give --n-head")
        print(f"to-llmc: n_head {NH} (GPT-2's for C = {C}; --n-head to change)", file=sys.stderr)
    if C % NH:
        raise ConvertError(f"--n-head {NH} does not divide C = {C}")
    V = args.vocab or rows
    if V > rows:
        raise ConvertError(f"--vocab {V} is more than wte's {rows} rows")
    if V > 65536:
        raise ConvertError(f"vocabulary {V} does not fit llm.c's uint16 token shards (65536 at most)")
    Vp = (V + 127) // 128 * 128

    if "lm_head.weight" in sd:
        head = f32(sd["lm_head.weight"])
        if head.shape != wte.shape or not torch.equal(head, wte):
            raise ConvertError(f"{args.input}: lm_head.weight is not tied to wte.weight "
                               "(seedgpt and llm.c tie the LM head to the token embedding)")

    shapes = {"ln1w": (C,), "ln1b": (C,), "qkvw": (3 * C, C), "qkvb": (3 * C,),
              "attprojw": (C, C), "attprojb": (C,), "ln2w": (C,), "ln2b": (C,),
              "fcw": (4 * C, C), "fcb": (4 * C,), "fcprojw": (C, 4 * C), "fcprojb": (C,)}
    used = {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias", "lm_head.weight"}
    # nanoGPT's bias=False has no bias at all, and a zero bias computes the same model; a model
    # missing only some biases is refused (a lost tensor must not silently become zeros)
    no_bias = "ln_f.bias" not in sd
    if no_bias:
        present = [k for k in sd if k.endswith(".bias") and not re.search(r"\.attn\.bias$", k)]
        if present:
            raise ConvertError(f"{args.input}: no ln_f.bias but {present[0]} is there: a bias is missing")
    tensors = {}
    for name, key in BLOCK_KEYS.items():
        per_layer = []
        for i in range(L):
            k = f"h.{i}.{key}"
            if k not in sd:
                if no_bias and key.endswith(".bias"):
                    per_layer.append(torch.zeros(shapes[name]))
                    continue
                raise ConvertError(f"{args.input}: no {k}")
            t = f32(sd[k])
            if conv1d and name in LINEAR_WEIGHTS:
                t = t.t().contiguous()
            if tuple(t.shape) != shapes[name]:
                raise ConvertError(f"{args.input}: {k} has shape {tuple(sd[k].shape)}, expected "
                                   f"{shapes[name]}{' transposed' if conv1d and name in LINEAR_WEIGHTS else ''}")
            per_layer.append(t)
            used.add(k)
        tensors[name] = torch.stack(per_layer)
    ignored = re.compile(r"h\.\d+\.attn\.(bias|masked_bias)$")   # causal-mask buffers
    extra = [k for k in sd if k not in used and not ignored.match(k)]
    if extra:
        raise ConvertError(f"{args.input}: unexpected keys {', '.join(extra[:4])}: not a plain GPT-2")
    dropped = rows - V
    if dropped:
        print(f"to-llmc: dropping wte rows {V}..{rows - 1} (max |w| {wte[V:].abs().max().item():.3g}); "
              f"they become zero padding", file=sys.stderr)
    wte_p = torch.zeros(Vp, C)
    wte_p[:V] = wte[:V]
    tensors["wte"] = wte_p
    tensors["wpe"] = wpe
    tensors["lnfw"] = f32(sd["ln_f.weight"])
    tensors["lnfb"] = f32(sd["ln_f.bias"]) if "ln_f.bias" in sd else torch.zeros(C)

    # a model file never holds a non-finite weight: ./train refuses to load one, so none is written
    for n in LLMC_ORDER:
        bad = ~torch.isfinite(tensors[n])
        if bool(bad.any()):
            i = int(bad.flatten().nonzero()[0])
            raise ConvertError(f"{args.input}: tensor {n} element {i} is {tensors[n].flatten()[i].item()}: "
                               "a model file never holds a non-finite weight; nothing written")
    header = np.zeros(256, dtype="<i4")
    header[:8] = [LLMC_MAGIC, LLMC_VERSION, maxT, V, L, NH, C, Vp]
    write_atomic(args.output, lambda f: [f.write(header.tobytes())] +
                 [f.write(tensors[n].numpy().astype("<f4").tobytes()) for n in LLMC_ORDER])
    P = sum(tensors[n].numel() for n in LLMC_ORDER)
    print(f"to-llmc: {args.input} -> {args.output}: L {L}, NH {NH}, C {C}, maxT {maxT}, V {V}, "
          f"Vp {Vp}, {P} parameters ({'Hugging Face Conv1D' if conv1d else 'nanoGPT Linear'} layout)")


# ---- reading the llm.c file ----------------------------------------------------------------------

def read_llmc(path):
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            header = np.frombuffer(f.read(1024), dtype="<i4")
    except OSError as e:
        raise ConvertError(f"{path}: cannot read: {e.strerror}")
    if header.size < 256:
        raise ConvertError(f"{path}: shorter than the 1024-byte header")
    magic, version = int(header[0]), int(header[1])
    if magic == SEED_MAGIC:
        raise ConvertError(f"{path}: a seedgpt-format model (grouped-query heads or another "
                           "non-GPT-2 option): no nanoGPT / Hugging Face equivalent")
    if magic != LLMC_MAGIC:
        raise ConvertError(f"{path}: magic {magic}, expected {LLMC_MAGIC} (an llm.c model file)")
    if version != LLMC_VERSION:
        raise ConvertError(f"{path}: version {version}, expected 3 (fp32; version 5 is llm.c's bf16)")
    maxT, V, L, NH, C, Vp = (int(x) for x in header[2:8])
    if min(maxT, V, L, NH, C, Vp) <= 0 or Vp < V or C % NH:
        raise ConvertError(f"{path}: bad header: maxT {maxT} V {V} L {L} NH {NH} C {C} Vp {Vp}")
    shapes = {"wte": (Vp, C), "wpe": (maxT, C), "ln1w": (L, C), "ln1b": (L, C),
              "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C), "attprojw": (L, C, C), "attprojb": (L, C),
              "ln2w": (L, C), "ln2b": (L, C), "fcw": (L, 4 * C, C), "fcb": (L, 4 * C),
              "fcprojw": (L, C, 4 * C), "fcprojb": (L, C), "lnfw": (C,), "lnfb": (C,)}
    P = sum(int(np.prod(shapes[n])) for n in LLMC_ORDER)
    if size != 1024 + 4 * P:
        raise ConvertError(f"{path}: {size} bytes, expected {1024 + 4 * P} for L {L} C {C} "
                           f"maxT {maxT} Vp {Vp} ({'truncated' if size < 1024 + 4 * P else 'oversized'})")
    flat = np.fromfile(path, dtype="<f4", offset=1024)
    tensors, at = {}, 0
    for n in LLMC_ORDER:
        k = int(np.prod(shapes[n]))
        tensors[n] = torch.from_numpy(flat[at:at + k].astype(np.float32).reshape(shapes[n]))
        at += k
    return {"maxT": maxT, "V": V, "L": L, "NH": NH, "C": C, "Vp": Vp}, tensors


def check_output(args, folder):
    """OUT before anything is written: a folder for --format hf (made if missing), a file path
    otherwise, and never IN itself."""
    out = args.output
    if folder and os.path.exists(out) and not os.path.isdir(out):
        raise ConvertError(f"{out} exists and is not a folder: --format hf writes a folder "
                           "(pytorch_model.bin, config.json); give a folder path")
    if not folder and os.path.isdir(out):
        raise ConvertError(f"{out} is a folder: --format nanogpt writes one file; give a file path")
    if os.path.exists(out) and os.path.exists(args.input) and os.path.samefile(out, args.input):
        raise ConvertError(f"{out} is the input {args.input}: give another output path")


def to_torch(args):
    check_output(args, args.format == "hf")
    cfg, t = read_llmc(args.input)
    V, L, C = cfg["V"], cfg["L"], cfg["C"]
    hf = args.format == "hf"
    wte = t["wte"][:V].clone()
    sd = {"transformer.wte.weight": wte, "transformer.wpe.weight": t["wpe"].clone()}
    for i in range(L):
        for name, key in BLOCK_KEYS.items():
            x = t[name][i].clone()
            if hf and name in LINEAR_WEIGHTS:
                x = x.t().contiguous()
            sd[f"transformer.h.{i}.{key}"] = x
    sd["transformer.ln_f.weight"] = t["lnfw"].clone()
    sd["transformer.ln_f.bias"] = t["lnfb"].clone()
    sd["lm_head.weight"] = wte   # tied: the same tensor, as in nanoGPT and GPT2LMHeadModel
    if hf:
        config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V,
                  "n_positions": cfg["maxT"], "n_ctx": cfg["maxT"], "n_embd": C, "n_layer": L,
                  "n_head": cfg["NH"], "n_inner": None, "activation_function": "gelu_new",
                  "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
                  "attn_pdrop": 0.0, "initializer_range": 0.02, "bos_token_id": V - 1,
                  "eos_token_id": V - 1, "tie_word_embeddings": True}
        os.makedirs(args.output, exist_ok=True)
        write_atomic(os.path.join(args.output, "pytorch_model.bin"), lambda f: torch.save(sd, f))
        write_atomic(os.path.join(args.output, "config.json"),
                     lambda f: f.write(json.dumps(config, indent=2).encode() + b"\n"))
    else:
        ckpt = {"model": sd, "model_args": {"n_layer": L, "n_head": cfg["NH"], "n_embd": C,
                                            "block_size": cfg["maxT"], "bias": True,
                                            "vocab_size": V, "dropout": 0.0}}
        write_atomic(args.output, lambda f: torch.save(ckpt, f))
    print(f"to-torch: {args.input} -> {args.output} ({'Hugging Face' if hf else 'nanoGPT'}): "
          f"L {L}, NH {cfg['NH']}, C {C}, maxT {cfg['maxT']}, V {V}")


def write_atomic(path, write):
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise ConvertError(f"{path}: cannot write: {e.strerror}")


def main(argv=None):
    p = argparse.ArgumentParser(prog="gpt2_convert.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("to-llmc", help="PyTorch GPT-2 weights -> llm.c fp32 model file")
    a.add_argument("input")
    a.add_argument("output")
    a.add_argument("--n-head", type=int, default=None)
    a.add_argument("--vocab", type=int, default=None)
    b = sub.add_parser("to-torch", help="llm.c fp32 model file -> nanoGPT checkpoint / HF folder")
    b.add_argument("input")
    b.add_argument("output")
    b.add_argument("--format", choices=["nanogpt", "hf"], default="nanogpt")
    args = p.parse_args(argv)
    try:
        if args.cmd == "to-llmc":
            if args.n_head is not None and args.n_head <= 0:
                raise ConvertError(f"--n-head {args.n_head}: expected a positive integer")
            if args.vocab is not None and args.vocab <= 0:
                raise ConvertError(f"--vocab {args.vocab}: expected a positive integer")
            to_llmc(args)
        else:
            to_torch(args)
    except ConvertError as e:
        print(f"gpt2_convert: {e}", file=sys.stderr)
        return 2
    except OSError as e:   # anything the checks above did not foresee: still one line
        print(f"gpt2_convert: {e.filename or args.output}: {e.strerror or e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
