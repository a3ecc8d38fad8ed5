#!/usr/bin/env python3
"""tests/torch_oracle.py — the whole seedgpt model against an independent PyTorch implementation.

    python3 tests/torch_oracle.py build/tests/oracle_harness

For each configuration this script builds a GPT-2 in PyTorch (written here, nanoGPT-like: tied LM
head, pre-norm blocks, GELU tanh approximation, causal attention written out with a mask, no
dropout; grouped-query heads by repeating the key/value heads), fills it with deterministic random
weights, writes the model file itself (numpy only: the header and the tensors in llm.c order,
independently of model/modelfile.c) and a batch file, runs tests/oracle_harness.c on them and
compares, per tensor, as relative norms ||c - torch|| / ||torch||:
  - the loss and every parameter gradient of step 0;
  - 10 steps of AdamW with gradient clipping on the same batch: each step's loss and gradient norm,
    and the final weights.

Output: one line per check, "ok   name: numbers" / "FAIL name: numbers" / "SKIP name: why"
(tests/run.sh counts them); exits non-zero when a check failed.

Tolerance (TOL = 1e-5). Both sides compute in float32 (unit roundoff 6e-8) the same mathematics in
different orders: OpenBLAS blocking versus torch's kernels, the LayerNorm backward written in
another form, seedgpt's cross-entropy and gradient norm in double. Each op adds relative errors of
order sqrt(K) * 6e-8 for its K-term sums (K <= 4C = 256 here), and a dozen ops in series keep the
per-tensor errors near 1e-7..1e-6 (as printed). 1e-5 leaves a margin of ten or more over that,
while any real mistake (a wrong index, transposition, missing term or scale) shows up at 1e-3 and
far above. After the AdamW steps the weights agree to ~1e-7: an update of size ~lr changes weights
of norm ~1 little, and AdamW's normalisation m / sqrt(v) keeps the gradients' relative error. The
exception is an element whose gradient is the small remainder of a cancelling sum (a nearly dead
GELU unit): its relative error is large and AdamW turns it into a difference of O(lr) per step; the
learning rate (1e-3) keeps that below 2e-6 of the tensor's norm (fcw of the GQA configuration).

One slice is compared differently: the key bias (qkv bias, key part). Its exact gradient is zero
(softmax is invariant to adding q.b_k to every score of a row), so both sides hold only rounding
noise there, and AdamW normalises that noise into steps of O(lr) with a random sign (~1e-3 after
10 steps, as a probe showed). Its step-0 gradient must be noise-sized on both sides (checked); its
final value is not compared (the rest of qkvb is, as every other tensor). It cannot influence
anything else beyond rounding, for the same reason.
"""
import math
import os
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except Exception as e:  # noqa: BLE001 - any import failure means "no oracle here"
    print(f"SKIP torch_oracle: cannot import torch and numpy with {sys.executable} ({e})")
    sys.exit(0)

TOL = 1e-5
STEPS = 10
LLMC_MAGIC, LLMC_VERSION = 20240326, 3
SEED_MAGIC, SEED_VERSION = 0x44454553, 1   # the bytes "SEED"

failed = 0


def check(cond, name, msg):
    global failed
    print(f"{'ok  ' if cond else 'FAIL'} {name}: {msg}", flush=True)
    if not cond:
        failed += 1


def rel(a, b):
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    den = np.linalg.norm(b)
    num = np.linalg.norm(a - b)
    return num / den if den > 0 else num


# ---- the model ---------------------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, C, NH, NKV):
        super().__init__()
        self.NH, self.NKV, self.HD = NH, NKV, C // NH
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = nn.Linear(C, (NH + 2 * NKV) * self.HD)   # q heads, k heads, v heads
        self.attn_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def attention(self, x):
        B, T, C = x.shape
        NH, NKV, HD = self.NH, self.NKV, self.HD
        q, k, v = self.c_attn(x).split([NH * HD, NKV * HD, NKV * HD], dim=2)
        q = q.view(B, T, NH, HD).transpose(1, 2)                       # (B, NH, T, HD)
        # query head h reads kv head h // (NH / NKV)
        k = k.view(B, T, NKV, HD).transpose(1, 2).repeat_interleave(NH // NKV, dim=1)
        v = v.view(B, T, NKV, HD).transpose(1, 2).repeat_interleave(NH // NKV, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HD))        # (B, NH, T, T)
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = att.masked_fill(~causal, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v                                                     # (B, NH, T, HD)
        return y.transpose(1, 2).reshape(B, T, C)

    def forward(self, x):
        x = x + self.attn_proj(self.attention(self.ln_1(x)))
        x = x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        C = cfg["C"]
        self.wte = nn.Embedding(cfg["V"], C)        # real vocab only; padded on the way to the file
        self.wpe = nn.Embedding(cfg["maxT"], C)
        self.blocks = nn.ModuleList([Block(C, cfg["NH"], cfg["NKV"]) for _ in range(cfg["L"])])
        self.ln_f = nn.LayerNorm(C, eps=1e-5)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for blk in self.blocks:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied LM head
        return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))

    # llm.c order: wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb,
    # fcprojw, fcprojb, lnfw, lnfb; per-layer tensors stacked over L.
    NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
             "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]

    def llmc_tensors(self, grad=False):
        """The 16 tensors in llm.c order as float32 numpy arrays (wte padded to Vp rows)."""
        get = (lambda p: p.grad if p.grad is not None else torch.zeros_like(p)) if grad \
            else (lambda p: p.data)
        per_layer = lambda f: torch.stack([get(f(b)) for b in self.blocks])  # noqa: E731
        wte = torch.zeros(self.cfg["Vp"], self.cfg["C"])
        wte[: self.cfg["V"]] = get(self.wte.weight)
        ts = [wte, get(self.wpe.weight),
              per_layer(lambda b: b.ln_1.weight), per_layer(lambda b: b.ln_1.bias),
              per_layer(lambda b: b.c_attn.weight), per_layer(lambda b: b.c_attn.bias),
              per_layer(lambda b: b.attn_proj.weight), per_layer(lambda b: b.attn_proj.bias),
              per_layer(lambda b: b.ln_2.weight), per_layer(lambda b: b.ln_2.bias),
              per_layer(lambda b: b.c_fc.weight), per_layer(lambda b: b.c_fc.bias),
              per_layer(lambda b: b.mlp_proj.weight), per_layer(lambda b: b.mlp_proj.bias),
              get(self.ln_f.weight), get(self.ln_f.bias)]
        return [t.detach().numpy().astype(np.float32) for t in ts]

    def decay_groups(self, wd):
        """nanoGPT's convention: decay 2-D weights and embeddings, not biases or LayerNorms."""
        decay, no_decay = [self.wte.weight, self.wpe.weight], [self.ln_f.weight, self.ln_f.bias]
        for b in self.blocks:
            decay += [b.c_attn.weight, b.attn_proj.weight, b.c_fc.weight, b.mlp_proj.weight]
            no_decay += [b.ln_1.weight, b.ln_1.bias, b.ln_2.weight, b.ln_2.bias, b.c_attn.bias,
                         b.attn_proj.bias, b.c_fc.bias, b.mlp_proj.bias]
        return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def init_random(model, seed):
    """Deterministic weights, larger than GPT-2's 0.02 so attention is far from uniform and the
    LayerNorm and bias paths carry real gradient."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g)
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.copy_(1.0 + 0.1 * r)
            elif name.endswith("bias"):
                p.copy_(0.05 * r)
            elif name in ("wte.weight", "wpe.weight"):
                p.copy_(0.1 * r)
            else:
                p.copy_(0.15 * r)


# ---- files -------------------------------------------------------------------------------------

def write_model_file(path, cfg, tensors):
    h = np.zeros(256, dtype="<i4")
    plain = cfg["NKV"] == cfg["NH"]
    h[0], h[1] = (LLMC_MAGIC, LLMC_VERSION) if plain else (SEED_MAGIC, SEED_VERSION)
    h[2:8] = [cfg["maxT"], cfg["V"], cfg["L"], cfg["NH"], cfg["C"], cfg["Vp"]]
    if not plain:
        h[8] = cfg["NKV"]
    with open(path, "wb") as f:
        f.write(h.tobytes())
        for t in tensors:
            f.write(np.ascontiguousarray(t, dtype="<f4").tobytes())


def write_batch_file(path, inputs, targets, hp, steps):
    B, T = inputs.shape
    with open(path, "wb") as f:
        f.write(np.array([B, T], dtype="<i4").tobytes())
        f.write(inputs.astype("<i4").tobytes())
        f.write(targets.astype("<i4").tobytes())
        f.write(np.array([hp["lr"], hp["beta1"], hp["beta2"], hp["eps"], hp["wd"], hp["clip"]],
                         dtype="<f4").tobytes())
        f.write(np.array([steps], dtype="<i4").tobytes())


# ---- one configuration -------------------------------------------------------------------------

def torch_steps(model, inputs, targets, hp, steps, clip):
    """AdamW steps on one batch; returns per-step (loss, grad norm before clipping)."""
    opt = torch.optim.AdamW(model.decay_groups(hp["wd"]), lr=hp["lr"],
                            betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"])
    out = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = model(inputs, targets)
        loss.backward()
        if clip is None:
            norm = torch.norm(torch.stack([p.grad.norm() for p in model.parameters()]))
        else:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        out.append((loss.item(), norm.item()))
    return out


def run_config(harness, cfg, B, T, seed, tmpdir):
    tag = f"L{cfg['L']}-NH{cfg['NH']}-NKV{cfg['NKV']}-C{cfg['C']}-V{cfg['V']}-maxT{cfg['maxT']}" \
          f"-B{B}-T{T}"
    t0 = time.time()
    torch.manual_seed(seed)
    model = GPT(cfg)
    init_random(model, seed)
    g = torch.Generator().manual_seed(seed + 1)
    inputs = torch.randint(0, cfg["V"], (B, T), generator=g)
    targets = torch.randint(0, cfg["V"], (B, T), generator=g)
    hp = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "wd": 0.1}
    init_state = {k: v.clone() for k, v in model.state_dict().items()}

    # Clip threshold: the median of the gradient norms of an unclipped run, so that clipping
    # engages in some steps and not in others.
    dry = torch_steps(model, inputs, targets, hp, STEPS, None)
    hp["clip"] = float(np.median([n for _, n in dry]))
    model.load_state_dict(init_state)

    # torch: step 0's loss and gradients, then the clipped AdamW run
    model.zero_grad(set_to_none=True)
    loss0 = model(inputs, targets)
    loss0.backward()
    grads0 = model.llmc_tensors(grad=True)
    init_tensors = model.llmc_tensors()
    model.load_state_dict(init_state)
    traj = torch_steps(model, inputs, targets, hp, STEPS, hp["clip"])
    final = model.llmc_tensors()
    t_torch = time.time() - t0

    # seedgpt
    mpath, bpath, opath = (os.path.join(tmpdir, f"{tag}.{x}") for x in ("model", "batch", "out"))
    write_model_file(mpath, cfg, init_tensors)
    write_batch_file(bpath, inputs.numpy(), targets.numpy(), hp, STEPS)
    t1 = time.time()
    r = subprocess.run([harness, mpath, bpath, opath], capture_output=True, text=True, timeout=120)
    t_c = time.time() - t1
    if r.returncode != 0:
        check(False, f"oracle_harness_runs[{tag}]",
              f"exit {r.returncode}: {r.stderr.strip()}")
        return
    sizes = [t.size for t in init_tensors]
    n = sum(sizes)
    out = np.fromfile(opath, dtype="<f4")
    expect_len = 1 + n + 2 * STEPS + n
    if out.size != expect_len:
        check(False, f"oracle_harness_output_size[{tag}]",
              f"{out.size} floats, expected {expect_len}")
        return
    c_loss0 = out[0]
    c_grads = np.split(out[1:1 + n], np.cumsum(sizes)[:-1])
    c_traj = out[1 + n:1 + n + 2 * STEPS].reshape(STEPS, 2)
    c_final = np.split(out[1 + n + 2 * STEPS:], np.cumsum(sizes)[:-1])

    C, L, V, NH, NKV = cfg["C"], cfg["L"], cfg["V"], cfg["NH"], cfg["NKV"]
    HD = C // NH
    kslice = slice(NH * HD, (NH + NKV) * HD)   # the key-bias part of each layer's qkvb row

    def split_qkvb(t):
        t = t.reshape(L, -1)
        rest = np.concatenate([t[:, :kslice.start], t[:, kslice.stop:]], axis=1)
        return rest, t[:, kslice]

    # step 0: loss and gradients
    e = abs(float(c_loss0) - loss0.item()) / abs(loss0.item())
    check(e < TOL, f"step0_loss_matches_torch[{tag}]",
          f"seedgpt {c_loss0:.7f} torch {loss0.item():.7f} rel {e:.1e} (tol {TOL:.0e})")
    errs = []
    for name, a, b in zip(GPT.NAMES, c_grads, grads0):
        if name == "qkvb":
            a_rest, a_k = split_qkvb(a)
            b_rest, b_k = split_qkvb(b)
            errs.append((name, rel(a_rest, b_rest)))
            # the exact key-bias gradient is 0: both sides must hold only rounding noise
            scale = np.linalg.norm(b_rest)
            knoise = max(np.linalg.norm(a_k), np.linalg.norm(b_k)) / scale
        else:
            errs.append((name, rel(a, b)))
    worst = max(errs, key=lambda x: x[1])
    check(worst[1] < TOL, f"step0_gradients_match_torch[{tag}]",
          " ".join(f"{k} {v:.1e}" for k, v in errs) + f"; max {worst[1]:.1e} ({worst[0]})")
    check(knoise < TOL, f"step0_key_bias_gradient_is_rounding_noise[{tag}]",
          f"||dbk|| / ||dqkvb other|| = {knoise:.1e} (exact value 0)")
    pad = np.abs(c_grads[0].reshape(cfg["Vp"], C)[V:]).max() if cfg["Vp"] > V else 0.0
    check(pad == 0.0, f"padded_vocab_rows_get_zero_gradient[{tag}]", f"max |dwte[V:]| = {pad}")

    # the AdamW run
    t_losses = np.array([l for l, _ in traj])
    t_norms = np.array([nn_ for _, nn_ in traj])
    loss_err = np.max(np.abs(c_traj[:, 0] - t_losses) / np.abs(t_losses))
    norm_err = np.max(np.abs(c_traj[:, 1] - t_norms) / t_norms)
    clipped_t = int(np.sum(t_norms > hp["clip"]))
    clipped_c = int(np.sum(c_traj[:, 1] > hp["clip"]))
    check(loss_err < TOL and norm_err < TOL and clipped_c >= 1,
          f"adamw_clipped_steps_match_torch[{tag}]",
          f"{STEPS} steps, loss {t_losses[0]:.4f} -> {t_losses[-1]:.4f}, max rel err loss "
          f"{loss_err:.1e} grad norm {norm_err:.1e}; clip {hp['clip']:.4f} engaged in "
          f"{clipped_c} steps (torch {clipped_t})")
    errs = []
    for name, a, b in zip(GPT.NAMES, c_final, final):
        if name == "qkvb":   # without the key bias (see the file's header)
            a, b = split_qkvb(a)[0], split_qkvb(b)[0]
        errs.append((name, rel(a, b)))
    worst = max(errs, key=lambda x: x[1])
    check(worst[1] < TOL, f"adamw_final_weights_match_torch[{tag}]",
          " ".join(f"{k} {v:.1e}" for k, v in errs) + f"; max {worst[1]:.1e} ({worst[0]})")
    pad = np.abs(c_final[0].reshape(cfg["Vp"], C)[V:]).max() if cfg["Vp"] > V else 0.0
    check(pad == 0.0, f"padded_vocab_rows_stay_zero_through_adamw[{tag}]",
          f"max |wte[V:]| = {pad}")
    print(f"# {tag}: torch {t_torch:.1f} s, seedgpt {t_c:.2f} s", flush=True)


def main():
    if len(sys.argv) != 2:
        print("usage: torch_oracle.py PATH/TO/oracle_harness", file=sys.stderr)
        return 2
    harness = sys.argv[1]
    if not os.access(harness, os.X_OK):
        check(False, "oracle_harness_exists", f"{harness} is not an executable")
        return 1
    torch.set_num_threads(2)
    configs = [
        # (config, B, T, seed)
        ({"L": 2, "NH": 4, "NKV": 4, "C": 64, "V": 300, "Vp": 384, "maxT": 32}, 3, 16, 1234),
        # T = maxT: every position, and every row of wpe, takes part
        ({"L": 3, "NH": 2, "NKV": 2, "C": 32, "V": 200, "Vp": 256, "maxT": 24}, 2, 24, 5678),
        # grouped-query heads: seedgpt's own header, query head h reads kv head h // 2
        ({"L": 2, "NH": 4, "NKV": 2, "C": 64, "V": 260, "Vp": 384, "maxT": 20}, 2, 20, 91011),
    ]
    with tempfile.TemporaryDirectory(prefix="seedgpt_oracle_") as tmpdir:
        for cfg, B, T, seed in configs:
            run_config(harness, cfg, B, T, seed, tmpdir)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
