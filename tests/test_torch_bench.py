#!/usr/bin/env python3
"""tests/test_torch_bench.py — the PyTorch peer's BLAS (tools/torch_bench.py), on this machine.

    python3 tests/test_torch_bench.py

A tiny row (L2 C64 T32, 1 step) is run three times through the tool, and its TORCH_BLAS line read:
  - the peer never runs OpenBLAS kernels of the SSE era on a CPU with AVX2 or AVX-512: either
    OpenBLAS picked a wider family itself, or the tool chose one (chosen=FAMILY:...);
  - no pinning variable (OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE) of the caller's environment reaches
    the peer: the only one it may run with is the family the tool chose;
  - --no-blas-choice runs OpenBLAS's own pick, as it is;
  - a chosen family whose product check fails is dropped (SEEDGPT_TORCH_BENCH_FAIL_CHECK=1 makes
    the check fail): the peer then runs what OpenBLAS picked, and says why. Where OpenBLAS picks a
    wide family itself, nothing is chosen and this check is skipped.
The environment's own OPENBLAS_* variables are left as they are. SKIP without torch.
Output lines "ok   name: ...", "FAIL name: ...", "SKIP name: why" (tests/run.sh counts them).
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "..", "tools", "torch_bench.py")
ROW = "L=2,H=2,C=64,V=257,maxT=32,B=2,T=32,p=0"
SSE_ERA = {"katmai", "coppermine", "northwood", "prescott", "banias", "atom", "core2", "penryn",
           "dunnington", "nehalem", "sandybridge", "opteron", "opteron_sse3", "barcelona", "bobcat"}
passed = failed = 0   # tests/run.sh counts the lines


def report(ok, name, msg):
    global passed, failed
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {msg}")
    passed += ok
    failed += not ok


def run(extra_env=None, args=()):
    env = dict(os.environ, OMP_WAIT_POLICY="passive", **(extra_env or {}))
    out = subprocess.run([sys.executable, TOOL, "--row", ROW, "--warmup", "0", "--steps", "1", *args],
                         env=env, capture_output=True, text=True, timeout=300).stdout
    for line in out.splitlines():
        if line.startswith("TORCH_SKIP"):
            return None
        if line.startswith("TORCH_BLAS "):
            return dict(w.split("=", 1) for w in line.split()[1:] if "=" in w)
    return {}


def main():
    try:
        import torch  # noqa: F401
    except Exception:  # noqa: BLE001
        print("SKIP torch_bench_blas: no torch importable by", sys.executable)
        return 0
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    wide = "avx2" in flags or "avx512f" in flags
    b = run()
    if b is None:
        print("SKIP torch_bench_blas: the tool cannot import torch")
        return 0
    if not b:
        report(False, "peer_reports_its_blas", "no TORCH_BLAS line")
        return 1
    core = b.get("core", "?")
    if core in ("none", "unknown"):
        print(f"SKIP peer_runs_no_sse_era_blas_on_a_wide_cpu: PyTorch loads no OpenBLAS here ({core})")
    elif not wide:
        print(f"SKIP peer_runs_no_sse_era_blas_on_a_wide_cpu: this CPU has no AVX2 ({core})")
    else:
        report(core.lower() not in SSE_ERA, "peer_runs_no_sse_era_blas_on_a_wide_cpu",
               f"core {core}, chosen {b.get('chosen')}")
    chosen = b.get("chosen", "none")
    pins = b.get("pins", "?")
    allowed = "none" if chosen.startswith("none") else f"OPENBLAS_CORETYPE={chosen.split(':')[0]}"
    report(pins == allowed, "no_pinning_variable_of_the_caller_reaches_the_peer",
           f"pins {pins} (allowed: {allowed}), dropped {b.get('dropped')}, chosen {chosen}")
    if chosen.startswith("none"):
        for name in ("no_blas_choice_runs_openblas_own_pick", "a_chosen_family_failing_its_product_check_is_dropped"):
            print(f"SKIP {name}: OpenBLAS picked {core} itself, nothing was chosen")
    else:
        r = run({"SEEDGPT_TORCH_BENCH_FAIL_CHECK": "1"})
        picked = chosen.split("OpenBLAS-picked-", 1)[-1]
        ok = bool(r) and r.get("core") == picked and r.get("pins") == "none" and \
            r.get("chosen", "").endswith("-gave-a-wrong-product")
        n = run(args=("--no-blas-choice",))
        report(bool(n) and n.get("core") == picked and n.get("pins") == "none" and n.get("chosen") == "none",
               "no_blas_choice_runs_openblas_own_pick",
               f"core {n.get('core') if n else None} (OpenBLAS's pick {picked}), pins "
               f"{n.get('pins') if n else None}, chosen {n.get('chosen') if n else None}")
        report(ok, "a_chosen_family_failing_its_product_check_is_dropped",
               f"core {r.get('core') if r else None} (OpenBLAS's pick {picked}), pins "
               f"{r.get('pins') if r else None}, chosen {r.get('chosen') if r else None}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
