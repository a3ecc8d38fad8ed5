#!/usr/bin/env bash
# tests/test_export.sh [BUILD/tests/logits_harness] — ./train export and ./train import: the
# safetensors file read by a reader written from the format's definition, a float64 GPT-2 forward
# over the exported tensors against seedgpt's logits, the round trips, bf16 rounding and widening,
# llm.c's bf16 model files, the tokenizer files, and the refusals of bad input
# (tests/test_export.py, numpy only: Debian's python3-numpy). SKIP without numpy.
set -u
cd "$(dirname "$0")/.."
TRAIN=${SEEDGPT_TRAIN:-./train}
HARNESS=${1:-build/tests/logits_harness}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
exec "$PY" tests/test_export.py "$TRAIN" "$HARNESS"
