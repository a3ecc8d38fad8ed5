#!/usr/bin/env python3
"""tools/torch_sdpa_bench.py — PyTorch's fused attention, timed the way seedgpt's CUDA attention
benchmark times its own kernel, for a side-by-side row in scripts/gpu_check.sh.

torch.nn.functional.scaled_dot_product_attention, causal, fp32 (and bf16 if asked), forward +
backward, with and without dropout, at the shapes given. Prints one JSON line per shape:
{"bench":"torch_sdpa", "B":..,"H":..,"T":..,"D":..,"p":..,"dtype":..,"ms":..,"tflops":..}.
FLOPs counted as seedgpt counts them: causal forward 2 * 2 * B*H*T*T*D / 2, backward 2.5 x that.
Exits 0 with a note when torch or a GPU is missing.
"""
import json
import sys
import time


def main():
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001 - any import failure means "not available here"
        print(f"# torch_sdpa: torch not importable ({e.__class__.__name__}); skipped")
        return 0
    if not torch.cuda.is_available():
        print("# torch_sdpa: no GPU visible to torch; skipped")
        return 0
    shapes = []
    for arg in sys.argv[1:]:           # B,H,T,D,p[,dtype]
        f = arg.split(",")
        shapes.append((int(f[0]), int(f[1]), int(f[2]), int(f[3]), float(f[4]),
                       f[5] if len(f) > 5 else "fp32"))
    if not shapes:
        shapes = [(8, 12, 1024, 64, 0.0, "fp32"), (8, 12, 1024, 64, 0.1, "fp32")]
    for B, H, T, D, p, dt in shapes:
        dtype = torch.float32 if dt == "fp32" else torch.bfloat16
        torch.manual_seed(0)
        q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=dtype, requires_grad=True)
                   for _ in range(3))
        do = torch.randn(B, H, T, D, device="cuda", dtype=dtype)

        def step():
            o = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
            o.backward(do)

        for _ in range(3):
            step()
        torch.cuda.synchronize()
        n = 10
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1e3 / n
        fwd = 2.0 * 2.0 * B * H * T * T * D / 2.0
        tflops = 3.5 * fwd / (ms * 1e-3) / 1e12
        print(json.dumps({"bench": "torch_sdpa", "B": B, "H": H, "T": T, "D": D, "p": p,
                          "dtype": dt, "ms": round(ms, 3), "tflops": round(tflops, 2),
                          "torch": torch.__version__}))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
