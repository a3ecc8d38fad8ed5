#!/usr/bin/env python3
"""tools/torch_bench.py — the PyTorch side of `make bench`: one row of tests/bench_model.c, the same
model and the same training step written in PyTorch, timed the same way.

    python3 tools/torch_bench.py --threads 2 --warmup 1 --steps 5 \
        --row L=4,H=4,KV=4,C=256,V=257,maxT=256,B=8,T=256,p=0.1,recompute=layer

What it builds is what model/gpt.c computes (DESIGN §2), written the nanoGPT way:
  - token + learned position embedding, dropout p on their sum;
  - L pre-norm blocks x = x + drop(attn(LN1(x))); x = x + drop(mlp(LN2(x))), LayerNorm eps 1e-5
    with weight and bias, every linear with a bias;
  - causal multi-head attention (grouped-query heads by repeating the key/value heads), dropout p
    on the attention probabilities; torch's fused scaled_dot_product_attention where this torch has
    it (2.0 and later), else written out with a mask (nanoGPT's own fallback);
  - GELU, tanh approximation, MLP width 4C;
  - final LayerNorm; LM head tied to the token embedding with Vp = V rounded up to 128 rows (as
    seedgpt computes it); mean cross-entropy over the real V columns;
  - the step: forward, zero_grad (set_to_none), backward, clip_grad_norm_(1.0), AdamW (lr 1e-4,
    betas 0.9 / 0.95, eps 1e-8, weight decay 0.1 on the 2-D weights and the embeddings, none on
    biases and LayerNorm: seedgpt's gpt_param_decay; torch's default implementation, which on
    the CPU is the per-tensor loop: foreach=True measured no faster here); initialisation N(0, 0.02), the residual
    projections 0.02 / sqrt(2L), biases zero (gpt_init_weights);
  - recompute=layer: torch.utils.checkpoint around every block; recompute=every:K around every run
    of K blocks (torch restores the RNG state, so the recomputed dropout masks are the same).
Tokens are random in [0, V), fresh for every step, as in bench_model.

--precision bf16 (or prec=bf16 in the row, bench_model's bf16 rows) runs the forward under
torch.autocast(device_type, dtype=torch.bfloat16): bf16 matmuls (and attention where autocast
casts it), fp32 weights and AdamW state, as seedgpt's --precision bf16; on the CPU that is
torch.autocast("cpu", dtype=torch.bfloat16), which runs its bf16 products through oneDNN.
On a GPU (--device cuda, the GPU check's side-by-side): the model and batches live on the GPU,
--compile wraps the model in
torch.compile, AdamW is the fused CUDA one, each phase is timed after torch.cuda.synchronize(),
and peak_rss reports torch.cuda.max_memory_allocated() (the device's peak) instead.

Threads: torch.set_num_threads(N); the caller sets OMP_WAIT_POLICY=passive (idle OpenMP threads
sleep instead of spinning, the setting that serves PyTorch best on shared cores).

A fair peer: OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE pin OpenBLAS (and the PyTorch that calls it)
to one kernel family, e.g. Haswell's AVX2 kernels on a CPU that has AVX-512. When either is set,
this script runs itself again with both removed from its own environment, before torch is
imported (OpenBLAS reads them as it loads), so PyTorch gets the kernels OpenBLAS picks for this
CPU; --keep-blas-env keeps them. An OpenBLAS older than the CPU may not know it and fall back
to a family of the SSE era (OpenBLAS 0.3.21 runs Prescott's kernels on a Xeon of family 6, model
207, at a fifth of its SkylakeX kernels' rate): when the family it picked lacks AVX2 on a CPU that
has AVX2 or AVX-512, the script runs itself again with OPENBLAS_CORETYPE set to the widest family
the CPU's flags allow (Cooperlake, SkylakeX, Haswell), checks that an fp32 product of
small-integer matrices (exact in any summation order) equals the integer product, and keeps the
choice only then (--no-blas-choice: no choice, OpenBLAS's own pick). It then reports the kernel family PyTorch's OpenBLAS actually runs: threadpoolctl's "architecture" where threadpoolctl is installed, else
openblas_get_corename() of the libopenblas this process loaded (found in /proc/self/maps, else
in torch's lib folder), through ctypes.

Prints one line "TORCH_ROW median_ms min_ms max_ms fwd_ms bwd_ms opt_ms peak_rss_bytes
base_rss_bytes loss params" (bench_model reads it), one line "TORCH_BLAS core=NAME via=HOW
lib=PATH pins=VARS dropped=VARS chosen=WHY" (the BLAS kernel family; pins: the pinning variables
still in this process's environment, "none" when it runs without them; dropped: those it removed
itself; chosen: "none", or which family OpenBLAS had picked when the script chose one)
and, with --json, a JSON line. peak_rss is the
process's ru_maxrss at the end; base_rss its RSS after importing torch, before the model existed.
Exits 0 with "TORCH_SKIP reason" when torch cannot be imported.
"""
import argparse
import ctypes
import glob
import math
import os
import resource
import sys
import time

BLAS_PIN_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
UNSET_MARK = "SEEDGPT_TORCH_BENCH_UNSET"   # what the re-run removed, for the report
CHOSEN_MARK = "SEEDGPT_TORCH_BENCH_CHOSEN"   # the family OpenBLAS had picked, when one was chosen
REJECTED_MARK = "SEEDGPT_TORCH_BENCH_REJECTED"   # a chosen family that failed the product check
# OpenBLAS's x86-64 kernel families that need no AVX2 (its DYNAMIC_ARCH fallbacks), and the
# families to choose instead, widest first, with the CPU flags each needs
SSE_ERA = {"katmai", "coppermine", "northwood", "prescott", "banias", "atom", "core2", "penryn",
           "dunnington", "nehalem", "sandybridge", "opteron", "opteron_sse3", "barcelona", "bobcat"}
WIDER = (("Cooperlake", {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"}),
         ("SkylakeX", {"avx512f", "avx512bw", "avx512vl", "avx512dq"}),
         ("Haswell", {"avx2", "fma"}))


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def choose_wider_blas(torch, core):
    """Runs this script again with a wider OPENBLAS_CORETYPE if OpenBLAS fell back to an SSE-era
    family on a CPU with AVX2 or better; rejects the choice if a product is then wrong."""
    if CHOSEN_MARK in os.environ:   # the re-run: check the chosen family's product
        a = torch.randint(-8, 9, (192, 160), dtype=torch.int64)
        b = torch.randint(-8, 9, (160, 224), dtype=torch.int64)
        wrong = os.environ.get("SEEDGPT_TORCH_BENCH_FAIL_CHECK") == "1"   # tests/test_torch_bench.py
        if wrong or not torch.equal((a.float() @ b.float()).to(torch.int64), a @ b):
            env = {k: v for k, v in os.environ.items() if k not in (CHOSEN_MARK, "OPENBLAS_CORETYPE")}
            env[REJECTED_MARK] = os.environ["OPENBLAS_CORETYPE"]
            sys.stdout.flush()
            os.execve(sys.executable, [sys.executable] + sys.argv, env)
        return
    if "--keep-blas-env" in sys.argv or "--no-blas-choice" in sys.argv or REJECTED_MARK in os.environ \
            or core.lower() not in SSE_ERA:
        return
    flags = cpu_flags()
    for family, need in WIDER:
        if need <= flags:
            env = dict(os.environ, OPENBLAS_CORETYPE=family)
            env[CHOSEN_MARK] = core
            sys.stdout.flush()
            os.execve(sys.executable, [sys.executable] + sys.argv, env)


def run_without_blas_pins():
    """Runs this script again without the OpenBLAS pinning variables, if any is set."""
    if "--keep-blas-env" in sys.argv or CHOSEN_MARK in os.environ:   # (a family chosen below)
        return
    pinned = [v for v in BLAS_PIN_VARS if v in os.environ]
    if not pinned:
        return
    env = {k: v for k, v in os.environ.items() if k not in BLAS_PIN_VARS}
    env[UNSET_MARK] = ",".join(pinned)
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def blas_core(torch):
    """(kernel family, how it was found, library) of the OpenBLAS this process runs."""
    try:
        import threadpoolctl
        for info in threadpoolctl.threadpool_info():
            if info.get("internal_api") == "openblas":
                return info.get("architecture") or "unknown", "threadpoolctl", info.get("filepath", "?")
    except Exception:  # noqa: BLE001 - not installed, or too old: fall back to ctypes
        pass
    libs = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and "openblas" in os.path.basename(parts[-1]) and parts[-1] not in libs:
                    libs.append(parts[-1])
    except OSError:
        pass
    libs += sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "*openblas*")))
    for path in libs:
        try:
            fn = ctypes.CDLL(path).openblas_get_corename
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_char_p
        return fn().decode(errors="replace"), "openblas_get_corename", path
    return "none", "no OpenBLAS loaded", "-"


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def parse_row(spec):
    r = dict(L=4, H=4, KV=0, C=256, V=257, maxT=256, B=8, T=256, p=0.0, recompute="none",
             prec="")
    for tok in spec.split(","):
        if "=" not in tok:
            sys.exit(f"torch_bench: row '{tok}': expected KEY=VALUE")
        k, v = tok.split("=", 1)
        if k not in r:
            sys.exit(f"torch_bench: row: unknown key '{k}'")
        r[k] = v if k in ("recompute", "prec") else (float(v) if k == "p" else int(v))
    if r["prec"] not in ("", "fp32", "bf16"):
        sys.exit(f"torch_bench: row: prec={r['prec']}: expected fp32 or bf16")
    if r["KV"] == 0:
        r["KV"] = r["H"]
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--row", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--keep-blas-env", action="store_true",
                    help="keep OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE (default: run without them)")
    ap.add_argument("--no-blas-choice", action="store_true",
                    help="run the family OpenBLAS picks even when it is of the SSE era on a wider CPU")
    a = ap.parse_args()
    run_without_blas_pins()
    r = parse_row(a.row)
    if r["prec"]:
        a.precision = r["prec"]   # the row's prec= (bench_model's bf16 rows) wins
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        import torch.utils.checkpoint as ckpt
    except Exception as e:  # noqa: BLE001 - any import failure means "no PyTorch side"
        print(f"TORCH_SKIP cannot import torch with {sys.executable} ({e.__class__.__name__})")
        return 0
    torch.set_num_threads(a.threads)
    if a.device == "cpu":
        choose_wider_blas(torch, blas_core(torch)[0])
    base_rss = rss_bytes()
    dev = torch.device(a.device)
    if a.device == "cuda" and not torch.cuda.is_available():
        print("TORCH_SKIP torch has no CUDA device here")
        return 0
    if a.device == "cpu" and a.compile:
        sys.exit("torch_bench: --compile is for --device cuda")
    cuda = a.device == "cuda"
    if cuda:
        # plain fp32 products in the fp32 rows, as seedgpt's (no TF32)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def sync():
        if cuda:
            torch.cuda.synchronize()

    L, NH, NKV, C, V, maxT = r["L"], r["H"], r["KV"], r["C"], r["V"], r["maxT"]
    B, T, p = r["B"], r["T"], r["p"]
    Vp = (V + 127) // 128 * 128
    HD = C // NH
    sdpa = getattr(F, "scaled_dot_product_attention", None)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(C, eps=1e-5)
            self.qkv = nn.Linear(C, (NH + 2 * NKV) * HD)
            self.attproj = nn.Linear(C, C)
            self.ln2 = nn.LayerNorm(C, eps=1e-5)
            self.fc = nn.Linear(C, 4 * C)
            self.fcproj = nn.Linear(4 * C, C)
            self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)), persistent=False)

        def attention(self, x):
            q, k, v = self.qkv(x).split([NH * HD, NKV * HD, NKV * HD], dim=2)
            q = q.view(B, T, NH, HD).transpose(1, 2)
            k = k.view(B, T, NKV, HD).transpose(1, 2)
            v = v.view(B, T, NKV, HD).transpose(1, 2)
            if NKV != NH:
                k = k.repeat_interleave(NH // NKV, dim=1)
                v = v.repeat_interleave(NH // NKV, dim=1)
            if sdpa is not None:
                y = sdpa(q, k, v, dropout_p=p if self.training else 0.0, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HD))
                att = att.masked_fill(~self.mask, float("-inf"))
                att = F.dropout(F.softmax(att, dim=-1), p, self.training)
                y = att @ v
            return self.attproj(y.transpose(1, 2).contiguous().view(B, T, C))

        def forward(self, x):
            x = x + F.dropout(self.attention(self.ln1(x)), p, self.training)
            h = F.gelu(self.fc(self.ln2(x)), approximate="tanh")
            return x + F.dropout(self.fcproj(h), p, self.training)

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(Vp, C)
            self.wpe = nn.Embedding(maxT, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.lnf = nn.LayerNorm(C, eps=1e-5)
            pol = r["recompute"]
            self.segment = 0 if pol == "none" else 1 if pol == "layer" else int(pol.split(":")[1])
            self.register_buffer("pos", torch.arange(T), persistent=False)

        def run_blocks(self, x, lo, hi):
            for blk in self.blocks[lo:hi]:
                x = blk(x)
            return x

        def forward(self, idx, targets):
            x = F.dropout(self.wte(idx) + self.wpe(self.pos), p, self.training)
            if self.segment == 0:
                x = self.run_blocks(x, 0, L)
            else:
                for lo in range(0, L, self.segment):
                    hi = min(lo + self.segment, L)
                    x = ckpt.checkpoint(self.run_blocks, x, lo, hi, use_reentrant=False)
            logits = F.linear(self.lnf(x), self.wte.weight)      # (B, T, Vp), tied head
            return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.view(-1))

    torch.manual_seed(1337)
    model = GPT()
    with torch.no_grad():
        for name, t in model.named_parameters():
            if name.endswith("bias"):
                t.zero_()
            elif "ln" in name:
                t.fill_(1.0)
            else:
                proj = name.endswith("attproj.weight") or name.endswith("fcproj.weight")
                t.normal_(0.0, 0.02 / math.sqrt(2 * L) if proj else 0.02)
        model.wte.weight[V:].zero_()
    model.to(dev)
    model.train()
    decay = [t for n, t in model.named_parameters() if t.dim() == 2]
    no_decay = [t for n, t in model.named_parameters() if t.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if cuda else {}))
    params = sum(t.numel() for t in model.parameters())
    run = torch.compile(model) if a.compile else model
    if cuda:
        torch.cuda.reset_peak_memory_stats()

    def forward(idx, tgt):
        if a.precision == "bf16":
            with torch.autocast(device_type=a.device, dtype=torch.bfloat16):
                return run(idx, tgt)
        return run(idx, tgt)

    gen = torch.Generator().manual_seed(42)
    step_ms, fwd_ms, bwd_ms, opt_ms = [], [], [], []
    loss = float("nan")
    for s in range(a.warmup + a.steps):
        idx = torch.randint(0, V, (B, T), generator=gen).to(dev)
        tgt = torch.randint(0, V, (B, T), generator=gen).to(dev)
        sync()
        t0 = time.perf_counter()
        lo = forward(idx, tgt)
        sync()
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        lo.backward()
        sync()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        t3 = time.perf_counter()
        loss = lo.item()
        if s >= a.warmup:
            step_ms.append((t3 - t0) * 1e3)
            fwd_ms.append((t1 - t0) * 1e3)
            bwd_ms.append((t2 - t1) * 1e3)
            opt_ms.append((t3 - t2) * 1e3)

    def median(x):
        x = sorted(x)
        n = len(x)
        return x[n // 2] if n % 2 else 0.5 * (x[n // 2 - 1] + x[n // 2])

    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if cuda:
        peak_rss = torch.cuda.max_memory_allocated()
    vals = [median(step_ms), min(step_ms), max(step_ms), median(fwd_ms), median(bwd_ms),
            median(opt_ms), peak_rss, base_rss, loss, params]
    print("TORCH_ROW " + " ".join(repr(float(v)) for v in vals))
    core, via, lib = blas_core(torch)
    dropped = os.environ.get(UNSET_MARK, "none")
    pins = ",".join(f"{v}={os.environ[v]}" for v in BLAS_PIN_VARS if v in os.environ) or "none"
    chosen = "none"
    if CHOSEN_MARK in os.environ:
        chosen = f"{os.environ.get('OPENBLAS_CORETYPE')}:OpenBLAS-picked-{os.environ[CHOSEN_MARK]}"
    elif REJECTED_MARK in os.environ:
        chosen = f"none:{os.environ[REJECTED_MARK]}-gave-a-wrong-product"
    print(f"TORCH_BLAS core={core} via={via} lib={lib} pins={pins} dropped={dropped} chosen={chosen}")
    if a.json:
        import json
        print(json.dumps({"bench": "torch_model", "row": a.row, "torch": torch.__version__,
                          "threads": a.threads, "sdpa": sdpa is not None,
                          "device": a.device, "precision": a.precision, "compile": a.compile, "median_ms": vals[0],
                          "fwd_ms": vals[3], "bwd_ms": vals[4], "opt_ms": vals[5],
                          "peak_rss": peak_rss, "base_rss": base_rss, "loss": loss,
                          "blas_core": core, "blas_core_via": via, "blas_pins": pins,
                          "blas_pins_dropped": dropped, "blas_chosen": chosen}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
