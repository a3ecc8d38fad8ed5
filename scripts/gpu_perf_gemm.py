#!/usr/bin/env python3
"""scripts/gpu_perf_gemm.py — torch.matmul on the GEMM problems of seedgpt's step, beside seedgpt's
own call (scripts/gpu_perf_step.sh).

    python3 scripts/gpu_perf_gemm.py BENCH_OUTPUT [--device cuda|cpu] [--warmup 5] [--reps 20]

BENCH_OUTPUT is what tests/cuda/bench_ops_cuda.cu printed: its {"bench":"gemm",...} lines give
each problem in row-major terms, out (M, N) = a (M, K) . b (K, N), with seedgpt's median ms. Each
is timed here as torch.matmul of bf16 a and b (a bf16 result, fp32 accumulation: what autocast
runs), on fresh random operands, --warmup calls and then the median of --reps, each call between
two CUDA events, the operands rotated among enough sets to hold 3 x 60 MB (the H200's L2) so that
no call finds its inputs in the cache. seedgpt's problem may write fp32 (its residual branches,
logits, weight gradients with beta 1): the table says so, since those bytes count against it.

Prints a table, then one JSON line per problem:
    {"bench":"gemm_torch","name":..,"M":..,"N":..,"K":..,"seedgpt_ms":..,"torch_ms":..,"ratio":..}
and the sums over a step (each problem times its calls). Exits 0 with "TORCH_SKIP reason" when
torch cannot be imported. On the CPU (the dry run) the same code times torch's CPU matmul: no figure.
"""
import argparse
import json
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bench_output")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure means no torch side
        print(f"TORCH_SKIP torch cannot be imported: {e}")
        return 0
    probs = []
    with open(a.bench_output) as f:
        for line in f:
            line = line.strip()
            if line.startswith('{"bench":"gemm"'):
                probs.append(json.loads(line))
    if not probs:
        print(f"gpu_perf_gemm: no GEMM line in {a.bench_output}", file=sys.stderr)
        return 1
    dev = a.device
    if dev == "cuda" and not torch.cuda.is_available():
        print("TORCH_SKIP torch sees no CUDA device")
        return 0
    dtype = torch.bfloat16
    l2 = 3 * 60 * 2**20

    def median(x):
        x = sorted(x)
        n = len(x)
        return x[n // 2] if n % 2 else 0.5 * (x[n // 2 - 1] + x[n // 2])

    def timed(f, nsets):
        for w in range(a.warmup):
            f(w % nsets)
        ts = []
        if dev == "cuda":
            torch.cuda.synchronize()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            for r in range(a.reps):
                e0.record()
                f(r % nsets)
                e1.record()
                e1.synchronize()
                ts.append(e0.elapsed_time(e1))
        else:
            for r in range(a.reps):
                t0 = time.perf_counter()
                f(r % nsets)
                ts.append((time.perf_counter() - t0) * 1e3)
        return median(ts)

    print(f"{'problem':<22} {'calls':>5} {'M':>7} {'N':>7} {'K':>7} {'D':>5} {'seedgpt ms':>11} "
          f"{'TFLOP/s':>8} {'torch ms':>9} {'TFLOP/s':>8} {'seedgpt/torch':>13}")
    tot_s = tot_t = 0.0
    for p in probs:
        M, N, K = p["M"], p["N"], p["K"]
        per_set = (M * K + K * N + M * N) * 2
        nsets = max(1, min(8, -(-l2 // per_set)))
        sets = [(torch.randn(M, K, device=dev, dtype=dtype), torch.randn(K, N, device=dev, dtype=dtype))
                for _ in range(nsets)]
        ms = timed(lambda s: torch.matmul(sets[s][0], sets[s][1]), nsets)
        fl = 2.0 * M * N * K
        ratio = p["ms"] / ms if ms > 0 else float("nan")
        tot_s += p["ms"] * p["calls"]
        tot_t += ms * p["calls"]
        print(f"{p['name']:<22} {p['calls']:>5} {M:>7} {N:>7} {K:>7} {p['d']:>5} {p['ms']:>11.4f} "
              f"{fl / (p['ms'] * 1e9):>8.1f} {ms:>9.4f} {fl / (ms * 1e9):>8.1f} {ratio:>12.2f}x")
        if p.get("plan"):
            print(f"{'':<22} seedgpt's plan: {p['plan']}")
        print(json.dumps({"bench": "gemm_torch", "name": p["name"], "M": M, "N": N, "K": K,
                          "calls": p["calls"], "seedgpt_ms": p["ms"], "torch_ms": round(ms, 5),
                          "ratio": round(ratio, 3)}))
        del sets
    print(f"{'step (x calls)':<22} {'':>5} {'':>7} {'':>7} {'':>7} {'':>5} {tot_s:>11.3f} {'':>8} "
          f"{tot_t:>9.3f} {'':>8} {tot_s / tot_t if tot_t else float('nan'):>12.2f}x")
    print(json.dumps({"bench": "gemm_torch_step", "seedgpt_ms": round(tot_s, 4), "torch_ms": round(tot_t, 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
