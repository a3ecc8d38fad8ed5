#!/usr/bin/env bash
# scripts/bench_chart.sh [BENCH.json] [OUT.png] — the benchmark chart (default out/bench.json ->
# docs/img/bench.png) with gnuplot; scripts/bench.sh calls it after `make bench`.
#   top left:     speed-up over PyTorch of every model row (torch ms / seedgpt ms; 1.5 marked)
#   top right:    step time per recompute policy (L8 model), seedgpt and PyTorch
#   bottom left:  peak memory per recompute policy: seedgpt's RSS and planned activations, PyTorch's RSS
#   bottom right: attention forward+backward time and the caller's memory against T (flash, naive)
# and, beside it, docs/img/frontier.png: the recompute policies of the L8 model (selective ones
# included) in fp32 and bf16 as points of counted peak memory and peak RSS against ms/step, and
# where the run has them, the 2-rank rows with and without ZeRO-1 (each rank's counted peak).
# The JSON lines are turned into gnuplot tables by python3's json module (no other dependency); the
# model rows also go to a markdown table next to the JSON (out/bench.md), the form the README shows.
set -euo pipefail
json=${1:-out/bench.json}
png=${2:-docs/img/bench.png}
[ -s "$json" ] || { echo "seedgpt: bench_chart: $json: no such benchmark output (run make bench)" >&2; exit 2; }
command -v gnuplot >/dev/null 2>&1 || { echo "seedgpt: bench_chart: gnuplot is not installed (scripts/setup.sh installs gnuplot-nox)" >&2; exit 2; }
py=$(command -v python3 || true)
[ -n "$py" ] || { echo "seedgpt: bench_chart: python3 is needed to read $json" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/seedgpt_chart.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

"$py" - "$json" "$tmp" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
out = sys.argv[2]
MiB = 1048576.0
model = [r for r in rows if r.get("bench") == "model"]
with open(f"{out}/speedup.dat", "w") as f:
    for r in model:
        if "speedup_vs_torch" in r:
            label = f'{r["config"][:5]} p{r["dropout"]:g} {r["recompute"]} {r.get("precision", "fp32")}'
            f.write(f'"{label}" {r["speedup_vs_torch"]:.4f}\n')
def prec(r):
    return r.get("precision", "fp32")
bf16_of = {r["recompute"]: r for r in model if r["config"] == "recompute" and prec(r) == "bf16"}
with open(f"{out}/policy.dat", "w") as f:
    for r in model:
        if r["config"] == "recompute" and prec(r) == "fp32":
            b = bf16_of.get(r["recompute"])
            f.write('"%s" %.3f %s %.3f %.3f %s %s %s\n' % (
                r["recompute"].replace("selective", "sel"), r["median_ms"],
                r.get("torch_median_ms", "NaN"),
                r["peak_rss"] / MiB, (r["act_bytes"] + r["recompute_bytes"]) / MiB,
                "%.3f" % (r["torch_peak_rss"] / MiB) if "torch_peak_rss" in r else "NaN",
                "%.3f" % b["median_ms"] if b else "NaN",
                "%.3f" % ((b["act_bytes"] + b["recompute_bytes"]) / MiB) if b else "NaN"))
att = [r for r in rows if r.get("bench") == "attention" and r["p"] == 0.0]
for impl in ("flash", "naive"):
    with open(f"{out}/att_{impl}.dat", "w") as f:
        for r in sorted((r for r in att if r["impl"] == impl), key=lambda r: r["T"]):
            f.write(f'{r["T"]} {r["fwd_ms"] + r["bwd_ms"]:.3f} {r["mem_bytes"] / MiB:.3f}\n')
# the README's table: one markdown row per model row
md = sys.argv[1][:-5] + ".md" if sys.argv[1].endswith(".json") else sys.argv[1] + ".md"
with open(md, "w") as f:
    f.write("| config | shape | p | recompute | precision | seedgpt ms/step | tok/s | GFLOP/s | % peak "
            "| % sgemm | peak RSS MiB | PyTorch ms/step | PyTorch peak RSS MiB | speed-up |\n")
    f.write("|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
    for r in model:
        shape = f'L{r["L"]} H{r["NH"]} C{r["C"]} V{r["V"]} B{r["B"]} T{r["T"]}'
        t = r.get("torch_median_ms")
        rc = r["recompute"] + (f' chunk={r["classifier_rows"]}' if r["config"] == "classifier" else "")
        f.write(f'| {r["config"]} | {shape} | {r["dropout"]:g} | {rc} | {prec(r)} | {r["median_ms"]:.0f} '
                f'| {r["tokens_per_s"]:.0f} | {r["gflops"]:.1f} '
                f'| {"%.1f%%" % r["pct_of_peak"] if "pct_of_peak" in r else "-"} | {r["pct_of_sgemm"]:.0f}% '
                f'| {r["peak_rss"] / MiB:.0f} | {"%.0f" % t if t else "-"} '
                f'| {"%.0f" % (r["torch_peak_rss"] / MiB) if t else "-"} '
                f'| {"%.2fx" % r["speedup_vs_torch"] if t else "-"} |\n')
# the frontier: counted peak against step time, one point per policy and precision of the L8 model
for pr in ("fp32", "bf16"):
    with open(f"{out}/frontier_{pr}.dat", "w") as f:
        for r in model:
            if r["config"] == "recompute" and prec(r) == pr:
                f.write('%.3f %.3f %.3f "%s"\n' % (r["median_ms"], r["peak_bytes"] / MiB,
                                                  r["peak_rss"] / MiB, r["recompute"]))
# ZeRO-1 against plain data parallelism, 2 ranks of the same L8 model (scripts/bench.sh step 3)
with open(f"{out}/frontier_zero.dat", "w") as f:
    for r in rows:
        if r.get("bench") == "zero":
            f.write('%.3f %.3f "%s %s"\n' % (r["median_ms"], r["peak_bytes"] / MiB, r["precision"],
                                               "ZeRO-1" if r["zero"] else "plain DP"))
with open(f"{out}/title.txt", "w") as f:
    sg = [r for r in rows if r.get("bench") == "sgemm"]
    load = sg[0]["loadavg1"] if sg else float("nan")
    th = sg[0]["threads"] if sg else 0
    rate = sg[0]["gflops"] if sg else float("nan")
    pk = [r for r in rows if r.get("bench") == "peak"]
    peak = f"fp32 peak {pk[0]['fp32_gflops']:.0f} GFLOP/s, " if pk else ""
    f.write(f"seedgpt vs PyTorch, {th} threads ({peak}sgemm {rate:.0f} GFLOP/s, load average {load:.1f} at start)")
PY

gnuplot <<GP
set terminal pngcairo size 1200,860 font "DejaVu Sans,10"
set output "$png.tmp"
set multiplot layout 2,2 title "$(cat "$tmp/title.txt")"
set grid ytics
set style data histograms
set style fill solid 0.8 border -1
set boxwidth 0.8

set title "speed-up over PyTorch (torch ms / seedgpt ms; bf16 rows against torch.autocast)"
set style histogram clustered gap 1
set xtics rotate by -45 scale 0 font ",8"
set yrange [0:*]
plot "$tmp/speedup.dat" using 2:xtic(1) lc rgb "#1f77b4" title "seedgpt", 1.5 with lines lw 2 dt 2 lc rgb "#d62728" title "1.5x"

set title "step time per recompute policy (L8 H4 C256 V257 B8 T256, dropout 0.1)"
set ylabel "ms / step"
set xtics rotate by -30 font ",8"
plot "$tmp/policy.dat" using 2:xtic(1) lc rgb "#1f77b4" title "seedgpt fp32", "" using 7 lc rgb "#2ca02c" title "seedgpt bf16", "" using 3 lc rgb "#ff7f0e" title "PyTorch fp32"

set title "peak memory per recompute policy"
set ylabel "MiB"
plot "$tmp/policy.dat" using 4:xtic(1) lc rgb "#1f77b4" title "seedgpt peak RSS", "" using 5 lc rgb "#aec7e8" title "seedgpt activations fp32 (planned)", "" using 8 lc rgb "#2ca02c" title "seedgpt activations bf16 (planned)", "" using 6 lc rgb "#ff7f0e" title "PyTorch peak RSS"

set title "attention fwd+bwd against T (B1 NH12 HD64, causal)"
set style data linespoints
set logscale xy
set xtics auto
set xlabel "T"
set ylabel "ms"
set y2label "MiB"
set logscale y2
set y2tics
set key left top
set yrange [*:*]
plot "$tmp/att_flash.dat" using 1:2 lw 2 pt 7 lc rgb "#1f77b4" title "flash time", \
     "$tmp/att_naive.dat" using 1:2 lw 2 pt 7 lc rgb "#ff7f0e" title "naive time", \
     "$tmp/att_flash.dat" using 1:3 axes x1y2 lw 2 dt 2 pt 5 lc rgb "#1f77b4" title "flash memory", \
     "$tmp/att_naive.dat" using 1:3 axes x1y2 lw 2 dt 2 pt 5 lc rgb "#ff7f0e" title "naive memory"
unset multiplot
GP
mv "$png.tmp" "$png"
echo "wrote $png"

# the memory/time frontier of the recompute policies (docs/img/frontier.png beside the chart)
frontier="$(dirname "$png")/frontier.png"
if [ -s "$tmp/frontier_fp32.dat" ]; then
zero_plot=
if [ -s "$tmp/frontier_zero.dat" ]; then
    zero_plot=", \\
     \"$tmp/frontier_zero.dat\" using 1:2 with points pt 9 ps 1.6 lc rgb \"#9467bd\" title \"2 ranks x B8, recompute layer, 1 thread each: counted peak per rank\", \\
     \"\" using 1:2:3 with labels offset char 1,0 left font \",8\" tc rgb \"#9467bd\" notitle"
fi
gnuplot <<GP
set terminal pngcairo size 900,600 font "DejaVu Sans,10"
set output "$frontier.tmp"
set title "recompute policies x precision, L8 H4 C256 V257 B8 T256, dropout 0.1: peak memory against step time"
set xlabel "ms / step (median)"
set ylabel "MiB"
set grid
set key right top
set offsets graph 0.08, graph 0.2, graph 0.1, graph 0.1
plot "$tmp/frontier_fp32.dat" using 1:2 with points pt 7 ps 1.6 lc rgb "#1f77b4" title "fp32 counted peak (model/mem.h)", \
     "" using 1:3 with points pt 6 ps 1.6 lc rgb "#1f77b4" title "fp32 peak RSS", \
     "" using 1:2:4 with labels offset char 1,0.6 left font ",8" notitle, \
     "$tmp/frontier_bf16.dat" using 1:2 with points pt 5 ps 1.6 lc rgb "#2ca02c" title "bf16 counted peak", \
     "" using 1:3 with points pt 4 ps 1.6 lc rgb "#2ca02c" title "bf16 peak RSS", \
     "" using 1:2:4 with labels offset char 1,-0.6 left font ",8" tc rgb "#2ca02c" notitle$zero_plot
GP
mv "$frontier.tmp" "$frontier"
echo "wrote $frontier"
fi
