#!/usr/bin/env bash
# tests/check_kernels_ops.sh — static checks of the op kernels' machine code, no GPU needed: nvcc
# compiles cuda/ops_cuda.cu and cuda/ops_bf16_cuda.cu for sm_90 with -Xptxas -v (registers, stack
# frame and spills per kernel) and keeps the PTX, and the checks read both:
#   - no kernel has a stack frame or spills, except those of a named allow-list (empty: none
#     needs one);
#   - every element-wise kernel of the new side (SEEDGPT_KERNELS unset) issues 16-byte global
#     loads (ld.global[.nc].v4 of 32-bit elements, or .v2 of 64-bit ones);
#   - the bf16 cross-entropy kernel does no fp64 arithmetic (no .f64 instruction).
# Each check is shown able to fail, every run: the 16-byte check against the baseline kernel each
# new one replaces (today's kernels, which use 2- and 4-byte accesses: each must fail it), the
# fp64 check against the fp32 cross-entropy kernels (exponentials in double, as the CPU's), the
# stack check against a planted kernel that writes a local array at run-time indices. SKIP without
# nvcc.
#   tests/check_kernels_ops.sh            the checks, one ok/FAIL/SKIP line each
set -u
cd "$(dirname "$0")/.."
NVCC=${NVCC:-nvcc}
if ! command -v "$NVCC" >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then NVCC=/usr/local/cuda/bin/nvcc; fi
names="kernels_have_no_stack_frame_or_spills elementwise_kernels_issue_16_byte_loads bf16_crossentropy_kernel_has_no_fp64"
if ! command -v "$NVCC" >/dev/null 2>&1; then
    for n in $names; do echo "SKIP $n: nvcc not found"; done
    exit 0
fi
if ! command -v c++filt >/dev/null 2>&1; then
    for n in $names; do echo "SKIP $n: c++filt (binutils) not found, the kernel names cannot be read"; done
    exit 0
fi
D=build/check_kernels_ops
rm -rf "$D"; mkdir -p "$D"
FLAGS=(-O3 -std=c++17 -I. -gencode arch=compute_90,code=sm_90 -Xptxas -v -cubin -keep -keep-dir "$D")
fail=0
for f in cuda/ops_cuda.cu cuda/ops_bf16_cuda.cu; do
    b=$(basename "$f" .cu)
    if ! "$NVCC" "${FLAGS[@]}" -o "$D/$b.cubin" "$f" > "$D/$b.ptxas" 2>&1; then
        echo "FAIL kernels_compile: nvcc on $f: $(grep -m2 -i error "$D/$b.ptxas" | tr '\n' ' ' | head -c 300)"
        exit 1
    fi
done
# the planted kernel: a local array written at run-time indices lives in local memory (a stack frame)
cat > "$D/planted.cu" <<'EOF'
__global__ void planted_stack_kernel(float* out, const int* idx) {
    float a[256];
    for (int i = 0; i < 256; i++) a[i] = out[i];
    for (int j = 0; j < 16; j++) a[idx[j] & 255] += 1.0f;   /* writes at run-time indices */
    out[threadIdx.x] = a[idx[threadIdx.x] & 255];
}
EOF
"$NVCC" "${FLAGS[@]}" -o "$D/planted.cubin" "$D/planted.cu" > "$D/planted.ptxas" 2>&1 || { echo "FAIL kernels_compile: the planted kernel"; exit 1; }

# ---- per kernel: demangled name, stack frame, spill stores, spill loads (from ptxas -v)
frames() {  # PTXAS_LOG...
    awk '/Function properties for/ {name=$NF; next}
         name != "" && /bytes stack frame/ {print name, $1, $5, $9; name=""}' "$@" |
        while read -r m s st ld; do printf '%s\t%s\t%s\t%s\n' "$(echo "$m" | c++filt)" "$s" "$st" "$ld"; done
}
# per kernel: demangled name, the count of 16-byte global loads (from the PTX)
wide_loads() {  # PTX...
    awk '/\.entry / {name=$3; sub(/\($/, "", name); n[name]+=0}
         /ld\.global/ && name != "" && /\.(v4\.(f32|u32|b32|s32)|v2\.(f64|u64|b64|s64))/ {n[name]++}
         END {for (k in n) print k, n[k]}' "$@" |
        while read -r m c; do printf '%s\t%s\n' "$(echo "$m" | c++filt)" "$c"; done
}
# per kernel: demangled name, the count of fp64 instructions
fp64_ops() {  # PTX...
    awk '/\.entry / {name=$3; sub(/\($/, "", name); n[name]+=0}
         name != "" && /^[[:space:]]*[a-z]/ && /\.f64/ {n[name]++}
         END {for (k in n) print k, n[k]}' "$@" |
        while read -r m c; do printf '%s\t%s\n' "$(echo "$m" | c++filt)" "$c"; done
}

# ---- 1. stack frames and spills
ALLOW=()   # "kernel name prefix: why" — none today
frames "$D/ops_cuda.ptxas" "$D/ops_bf16_cuda.ptxas" > "$D/frames.txt"
total=$(wc -l < "$D/frames.txt")
bad=$(awk -F'\t' '$2 != 0 || $3 != 0 || $4 != 0' "$D/frames.txt")
for a in "${ALLOW[@]+"${ALLOW[@]}"}"; do bad=$(echo "$bad" | grep -v -E "^(void )?${a%%:*}" || true); done
planted=$(frames "$D/planted.ptxas" | awk -F'\t' '$2 != 0 || $3 != 0 || $4 != 0' | wc -l)
if [ "$total" -gt 0 ] && [ -z "$bad" ] && [ "$planted" -eq 1 ]; then
    echo "ok   kernels_have_no_stack_frame_or_spills: $total kernels of cuda/ops_cuda.cu and cuda/ops_bf16_cuda.cu, none with a stack frame or spills (allow-list empty); the check flags the planted kernel (a local array written at run-time indices: $(frames "$D/planted.ptxas" | cut -f2) bytes of stack)"
else
    echo "FAIL kernels_have_no_stack_frame_or_spills: $total kernels; with a stack frame or spills (name, stack, spill stores, spill loads): $(echo "$bad" | head -5 | tr '\t\n' ' ;'); planted kernel flagged: $planted (want 1)"
    fail=1
fi

# ---- 2. 16-byte loads: each new element-wise kernel, and the baseline kernel it replaces
wide_loads "$D/ops_cuda.ptx" "$D/ops_bf16_cuda.ptx" > "$D/wide.txt"
PAIRS=(
    "residual_dropout_forward_vec_kernel(|residual_dropout_forward_kernel("
    "dropout_backward_vec_kernel(|dropout_backward_kernel("
    "layernorm_forward_vec_kernel<float>(|layernorm_forward_kernel<float>("
    "layernorm_forward_vec_kernel<unsigned short>(|layernorm_forward_kernel<unsigned short>("
    "layernorm_forward_vec_kernel<sg_h16>(|layernorm_forward_kernel<sg_h16>("
    "residual_layernorm_forward_kernel<float>(|residual_dropout_forward_kernel("
    "residual_layernorm_forward_kernel<unsigned short>(|residual_dropout_forward_kernel("
    "residual_layernorm_forward_kernel<sg_h16>(|residual_dropout_forward_kernel("
    "layernorm_backward_vec_kernel(|layernorm_backward_dinp_kernel("
    "gelu_forward_vec_kernel<float>(|gelu_forward_kernel<float>("
    "gelu_forward_vec_kernel<unsigned short>(|gelu_forward_kernel<unsigned short>("
    "gelu_forward_vec_kernel<sg_h16>(|gelu_forward_kernel<sg_h16>("
    "gelu_backward_vec_kernel<float>(|gelu_backward_kernel<float>("
    "gelu_backward_vec_kernel<unsigned short>(|gelu_backward_kernel<unsigned short>("
    "gelu_backward_vec_kernel<sg_h16>(|gelu_backward_kernel<sg_h16>("
    "round_to_act16_vec_kernel<unsigned short>(|round_to_act16_kernel<unsigned short>("
    "round_to_act16_vec_kernel<sg_h16>(|round_to_act16_kernel<sg_h16>("
    "round_gelu_bf16_vec_kernel(|round_bf16_kernel("
    "column_sum_partials_round_kernel(|round_pad_act16_kernel<unsigned short>("
    "adamw_tensors_kernel(|adamw_kernel("
    "crossentropy_bf16_kernel(|crossentropy_forward_kernel("
)
# a kernel's line: its demangled name starts with "void " when it is a template's instance
line_of() { awk -F'\t' -v k="$1" 'index($1, k) == 1 || index($1, "void " k) == 1' "$2" | head -1; }
loads_of() { line_of "$1" "$D/wide.txt" | cut -f2; }
missing=""; narrow=""; baseline_wide=""; shown=0
for p in "${PAIRS[@]}"; do
    new=${p%%|*}; old=${p##*|}
    nn=$(loads_of "$new"); no=$(loads_of "$old")
    if [ -z "$nn" ]; then missing="$missing ${new%(}"; continue; fi
    [ "$nn" -gt 0 ] || narrow="$narrow ${new%(}"
    if [ -n "$no" ] && [ "$no" -eq 0 ]; then shown=$((shown + 1)); else baseline_wide="$baseline_wide ${old%(}=${no:-absent}"; fi
done
if [ -z "$missing" ] && [ -z "$narrow" ] && [ -z "$baseline_wide" ]; then
    echo "ok   elementwise_kernels_issue_16_byte_loads: ${#PAIRS[@]} new kernels each issue 16-byte global loads (ld.global.v4 of 32-bit elements); the $shown baseline kernels they replace issue none, so each fails the check"
else
    echo "FAIL elementwise_kernels_issue_16_byte_loads: not found:${missing:- none}; without a 16-byte load:${narrow:- none}; baseline kernels that pass the check (so it cannot tell):${baseline_wide:- none}"
    fail=1
fi

# ---- 3. fp64 in the bf16 cross-entropy kernel
fp64_ops "$D/ops_cuda.ptx" "$D/ops_bf16_cuda.ptx" > "$D/fp64.txt"
ce=$(line_of "crossentropy_bf16_kernel(" "$D/fp64.txt" | cut -f2)
old_ce=$(line_of "crossentropy_forward_kernel(" "$D/fp64.txt" | cut -f2)
if [ -z "$ce" ]; then
    echo "SKIP bf16_crossentropy_kernel_has_no_fp64: no crossentropy_bf16_kernel in cuda/ (the bf16 table runs the fp32 kernels, $old_ce fp64 instructions in crossentropy_forward_kernel)"
elif [ "$ce" -eq 0 ] && [ "${old_ce:-0}" -gt 0 ]; then
    echo "ok   bf16_crossentropy_kernel_has_no_fp64: crossentropy_bf16_kernel has no .f64 instruction; the check flags the fp32 table's crossentropy_forward_kernel ($old_ce .f64 instructions: exponentials in double, as the CPU's)"
else
    echo "FAIL bf16_crossentropy_kernel_has_no_fp64: crossentropy_bf16_kernel has $ce .f64 instructions; the fp32 kernel has ${old_ce:-none} (want > 0: the check must see them)"
    fail=1
fi
exit $fail
