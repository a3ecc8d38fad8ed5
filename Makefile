# seedgpt — build, test, bench.
#   make            the CPU trainer ./train
#   make test       every test; ends with "N passed, N failed"
#   make bench      speed and memory against PyTorch side by side (not a test; BENCH_QUICK=1: ~4 min)
#   make verify     the recompute-and-dropout teaching table
#   make demo       the README's first run: setup, the King James Bible, a small model with dropout
#                   and recompute, eval, a sample and the loss plot (DEMO_STEPS, default 1500)
#   make plot RUN=DIR   DIR/log.jsonl -> DIR/loss.png (gnuplot)
#   make kjv        a small model on the King James Bible (plain: no recompute, no plot)
#   make fuzz       the loaders' fuzzers (FUZZ_SECONDS each); make test-asan: the suite under ASan
#   make cuda       the CUDA trainer ./train_cuda (nvcc; --device cpu|cuda, default cuda)
#   make mpi        the data-parallel trainer ./train_mpi (mpicc): mpirun -np N ./train_mpi ...
#   make mpi-cuda   ./train_mpi_cuda: the same with NCCL for --device cuda (one GPU per rank)
#   make mpi-cuda-check  compiles and links the NCCL path alone (dist/dist_*.{c,cu})
#   make cuda-nccl  ./train_cuda_nccl: GPU ranks started without MPI (--rank, --world, --init-file)
#   make test-cuda-emu   the CUDA kernels run on the CPU through cuda/emu/cuda_emu.h, against
#                   their CPU twins (part of make test): plainly, then the ThreadSanitizer subset
#   make test-cuda-emu-tsan   that subset alone, two blocks at a time (docs/cuda-emulation.md)
#   make test-cuda  the same tests on a real GPU (needs one)
#   make dev-cuda   dev/cuda: per op, kernel variants validated and timed (nvcc; run on a GPU,
#                   scripts/dev_cuda_bench.sh); make dev-cuda-emu: their validation, emulated
#   make mutants    mutation testing (not part of make test): each planted bug of tests/mutants/
#                   must make one of its tests fail (MUTANT=NAME runs the mutants matching NAME)

CC      ?= gcc
NVCC    ?= nvcc
CUDA_HOME ?= /usr/local/cuda
# Bitwise reproducibility (DESIGN §4): no -ffast-math; ISO C mode keeps FMA contraction off.
# -O3 rather than -O2: gcc 12's -O2 vectorises only loops that need no alias check, which left
# AdamW, the norms and the element-wise passes scalar (AdamW: 290 vs 110 ms at 124M). Without
# reassociation or contraction a vectorised loop does the scalar loop's operations, so the bits
# are the same (a model trained by either build is byte-identical).
CFLAGS  ?= -O3 -march=native
# -fno-math-errno lets sqrtf vectorise, -fno-trapping-math lets gcc vectorise loops that compare
# floats (the clamps of vexpf/vexpd, a row's max); neither changes a result bit (they drop only
# errno and the floating-point exception flags, which seedgpt never reads).
# -Wpointer-arith: operand activations are void* (fp32 or bf16); arithmetic on one must name its type.
CFLAGS  += -std=c11 -fopenmp -fno-math-errno -fno-trapping-math -Wall -Wextra -Wno-unused-parameter -Wpointer-arith -D_GNU_SOURCE -g -I.
# ---- system libraries: each one optional --------------------------------------------------
# A bare GPU machine has the CUDA toolkit and a C compiler but none of Debian's -dev packages
# (scripts/setup.sh installs them here). Each library below is probed; where it is missing the
# build leaves its part out, says so at start-up and in --version (SEEDGPT_NO_*), and goes on.
# tests/check_bare_build.sh proves it by hiding them all.
# A probe is a tiny program (scripts/probe/) that must compile and link: a header that is
# missing, empty or without the declarations fails it, and so does a missing library.
sg_probe = $(shell $(CC) -o /dev/null $(1) $(2) >/dev/null 2>&1 && echo 1)
# CBLAS (OpenBLAS): only the sgemm rate quoted beside the measured peak (at start-up and by
# ./train peak; MFU reads against the peak, cpu/peak.h), and the benchmarks. OpenBLAS's OpenMP build shares the OpenMP threads; the default
# pthread build keeps a second pool that spins against them (measured: the small model's step
# 1.7x slower on 2 cores).
OPENBLAS_OMP := /usr/lib/x86_64-linux-gnu/openblas-openmp
ifneq ($(wildcard $(OPENBLAS_OMP)/libopenblas.so.0),)
CBLAS_LIBS := -L$(OPENBLAS_OMP) -Wl,-rpath,$(OPENBLAS_OMP) -l:libopenblas.so.0
else
CBLAS_LIBS := -lopenblas
endif
HAVE_CBLAS := $(call sg_probe,scripts/probe/cblas.c,$(CBLAS_LIBS))
ifeq ($(HAVE_CBLAS),1)
LDLIBS  += $(CBLAS_LIBS)
else
CFLAGS  += -DSEEDGPT_NO_CBLAS
endif
LDLIBS  += -lm
# GPT-2 BPE (data/bpe.c): encoder.json through cJSON, the pre-tokenising regex through PCRE2.
# Without them the build takes data/bpe_none.c, whose loader refuses --tokenizer gpt2.
HAVE_BPE_LIBS := $(call sg_probe,scripts/probe/bpe.c,-lcjson -lpcre2-8)
ifeq ($(HAVE_BPE_LIBS),1)
BPE_SRC := data/bpe.c
LDLIBS  += -lcjson -lpcre2-8
else
BPE_SRC := data/bpe_none.c
CFLAGS  += -DSEEDGPT_NO_BPE
endif
# MPI: ./train_mpi (make mpi, below) and its tests only where mpicc builds a program
MPICC   ?= mpicc
HAVE_MPI := $(shell $(MPICC) -o /dev/null scripts/probe/mpi.c >/dev/null 2>&1 && echo 1)
ifneq ($(HAVE_MPI),1)
CFLAGS  += -DSEEDGPT_NO_MPI
endif

BUILD   := build

# model/ (the network, its files and plan, the backend table), cpu/ (the CPU backend), dist/ (the
# single-process transport; ./train_mpi swaps in dist/dist_mpi.c)
CORE_SRC := model/gpt.c model/backend.c model/plan.c model/mem.c model/modelfile.c model/state.c \
            model/sample.c model/profile.c model/eval.c model/safetensors.c model/hf.c model/zero.c \
            cpu/backend_cpu.c cpu/ops_cpu.c cpu/gemm_cpu.c cpu/gemm_bf16_cpu.c cpu/ops_bf16_cpu.c \
            cpu/ops_fp16_cpu.c cpu/peak.c \
            dist/dist_none.c dist/init_file.c \
            checkpoint/checkpoint.c \
            attention/flash_cpu.c attention/flash_bf16_cpu.c attention/flash_fp16_cpu.c \
            data/tokenizer.c $(BPE_SRC) data/shards.c data/prepare.c data/hellaswag.c \
            data/hellaswag_prepare.c
CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/%.o)
# Test builds: the same sources with SEEDGPT_TEST_BUILD (NaN-filled scratch, allocation counting).
TEST_OBJ := $(CORE_SRC:%.c=$(BUILD)/test/%.o)

HEADERS := $(wildcard *.h model/*.h cpu/*.h dist/*.h attention/*.h data/*.h checkpoint/*.h random/*.h util/*.h tests/*.h)
# the bf16 and fp16 attention is attention/flash_cpu.c compiled again, the fp16 ops cpu/ops_bf16_cpu.c
$(BUILD)/attention/flash_bf16_cpu.o $(BUILD)/test/attention/flash_bf16_cpu.o: attention/flash_cpu.c
$(BUILD)/attention/flash_fp16_cpu.o $(BUILD)/test/attention/flash_fp16_cpu.o: attention/flash_cpu.c
$(BUILD)/cpu/ops_fp16_cpu.o $(BUILD)/test/cpu/ops_fp16_cpu.o: cpu/ops_bf16_cpu.c

# plain `make` builds the CPU trainer (config, below, would otherwise be the first rule)
.DEFAULT_GOAL := all
.PHONY: all test test-run test-asan fuzz kjv demo plot setup verify bench clean config
# `make config`: what this machine's build has and leaves out (scripts/gpu_check.sh prints it first)
yes_no = $(if $(filter 1,$(1)),yes,NO: $(2))
config:
	@echo "seedgpt build config:"
	@echo "  OpenBLAS (sgemm reference rate, benchmarks):     $(call yes_no,$(HAVE_CBLAS),left out; MFU still reads against the measured peak)"
	@echo "  GPT-2 tokenizer (cJSON + PCRE2):                 $(call yes_no,$(HAVE_BPE_LIBS),left out; --tokenizer gpt2 is refused)"
	@echo "  MPI (./train_mpi, make mpi):                      $(call yes_no,$(HAVE_MPI),left out; ./train_mpi is not built)"
	@echo "  nvcc (make cuda):                                 $(if $(shell command -v $(NVCC) 2>/dev/null),$(shell command -v $(NVCC)),NO: not found)"
	@$(if $(shell command -v $(NVCC) 2>/dev/null),echo "  CUDA targets (CUDA_ARCHS):                       $(addprefix sm_,$(CUDA_ARCHS_BUILT)) + PTX compute_$(CUDA_PTX_ARCH)$(if $(CUDA_ARCHS_LEFT_OUT), (NO $(addprefix sm_,$(CUDA_ARCHS_LEFT_OUT)): this nvcc cannot build it))",true)
# test-asan builds its trainer elsewhere (TRAIN_BIN)
TRAIN_BIN ?= train
all: $(TRAIN_BIN)

# The trainer: train.c (the run and the subcommands) and cli.c (its flags). cli.c has no CUDA
# code: every trainer below links this one object of it.
$(TRAIN_BIN): $(BUILD)/train.o $(BUILD)/cli.o $(CORE_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/test/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DSEEDGPT_TEST_BUILD -c -o $@ $<

# The data-parallel trainer (make mpi, below) is part of make test where mpicc exists.
ifeq ($(HAVE_MPI),1)
MPI_BIN ?= train_mpi
else
MPI_BIN ?=
endif
MPI_TEST ?= tests/test_mpi.sh
# ZeRO-1 (--zero 1) under mpirun: bitwise against plain data parallelism, resume, refusals
ZERO_TEST ?= tests/test_zero.sh
# context parallelism across processes (tests/test_cp.sh): ./train_mpi and the trainers' test builds
CP_TEST ?= tests/test_cp.sh
CP_BINS := $(if $(MPI_BIN),$(BUILD)/tests/train_test $(BUILD)/tests/train_mpi_test)

# ---- tests ---------------------------------------------------------------------------------
# Each C test is tests/NAME.c linked against the test build of the core.
C_TESTS := test_philox test_ops test_attention test_cp test_data test_modelfile test_model test_checkpoint test_opts \
           test_state test_corrupt test_bpe test_sample test_accum test_schedule test_gemm test_gemm_bf16 test_bf16 test_fp16 test_fp16_cpu test_peak \
           test_profile test_init_file test_zero_masters
C_TEST_BINS := $(C_TESTS:%=$(BUILD)/tests/%)

# cuRAND's host generator is the external oracle for Philox (it runs without a GPU).
HAVE_CUDA := $(shell test -f $(CUDA_HOME)/include/curand.h && echo 1)
ifeq ($(HAVE_CUDA),1)
CURAND_TEST := $(BUILD)/tests/test_curand
$(BUILD)/tests/test_curand: tests/test_curand.c random/philox.h tests/test.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(CUDA_HOME)/include -o $@ $< -L$(CUDA_HOME)/lib64 -lcurand \
		-Wl,-rpath,$(CUDA_HOME)/lib64 -lm
CURAND_RUN := $(CURAND_TEST)
else
CURAND_TEST :=
CURAND_RUN := "echo SKIP philox_matches_curand_host: no CUDA toolkit at $(CUDA_HOME)"
endif

# The attention kernel at other tile sizes: the test #includes attention/flash_cpu.c itself, so it
# links no core object, only the attention reference.
ATTN_TILE_TESTS := $(BUILD)/tests/test_attention_tiles $(BUILD)/tests/test_attention_tiles_odd

$(BUILD)/tests/test_attention_tiles: tests/test_attention_tiles.c attention/flash_cpu.c tests/ref_attention.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DSEEDGPT_TEST_BUILD -o $@ $< tests/ref_attention.c $(LDLIBS)

$(BUILD)/tests/test_attention_tiles_odd: tests/test_attention_tiles.c attention/flash_cpu.c tests/ref_attention.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DSEEDGPT_TEST_BUILD -DFLASH_BQ=7 -DFLASH_BK=5 -DFLASH_PORTABLE -o $@ $< tests/ref_attention.c $(LDLIBS)

$(BUILD)/bench_attention: tests/bench_attention.c $(BUILD)/attention/flash_cpu.o $(BUILD)/cpu/peak.o $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/attention/flash_cpu.o $(BUILD)/cpu/peak.o $(LDLIBS)

# seedgpt's GEMM against cblas_sgemm on GPT-2 shapes (not a test)
$(BUILD)/bench_gemm: tests/bench_gemm.c $(BUILD)/cpu/gemm_cpu.o $(BUILD)/cpu/gemm_bf16_cpu.o $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/cpu/gemm_cpu.o $(BUILD)/cpu/gemm_bf16_cpu.o $(LDLIBS)

# the CPU's measured fp32 / bf16 peak per path (cpu/peak.c; not a test)
$(BUILD)/bench_peak: tests/bench_peak.c $(BUILD)/cpu/peak.o $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/cpu/peak.o $(LDLIBS)

$(BUILD)/bench_model: tests/bench_model.c $(CORE_OBJ) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(CORE_OBJ) $(LDLIBS)

bench:
	@scripts/bench.sh

$(BUILD)/tests/bigram_baseline: tests/bigram_baseline.c $(TEST_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(TEST_OBJ) $(LDLIBS)

# (the state files' CRC-32 is checked against the tests' own bitwise oracle, tests/crc32_ref.h)
$(BUILD)/tests/%: tests/%.c $(TEST_OBJ) $(HEADERS) $(wildcard tests/*.c)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DSEEDGPT_TEST_BUILD -o $@ $< $(filter tests/ref_%.c,$(wildcard tests/*.c)) $(TEST_OBJ) $(LDLIBS)

# Every CPU test binary, without running them (make test builds and runs them).
.PHONY: test-bins
test-bins: $(TRAIN_BIN) $(MPI_BIN) $(CP_BINS) $(C_TEST_BINS) $(ATTN_TILE_TESTS)

# The PyTorch oracle: the whole model against an independent implementation (SKIP without torch).
ORACLE := $(BUILD)/tests/oracle_harness
# seedgpt's logits for tests/test_export.py's float64 GPT-2 forward over an exported model
LOGITS_HARNESS := $(BUILD)/tests/logits_harness
TORCH_PYTHON ?= $(shell for p in /usr/bin/python3 python3; do $$p -c 'import torch' >/dev/null 2>&1 && { echo $$p; exit; }; done; echo /usr/bin/python3)

# `make test` first installs what is missing (scripts/setup.sh), then builds and runs everything.
# The builds under make test (the trainer, the ASan and emulated trees, each a sub-make of the
# suite) run TEST_JOBS at a time, one per core. The tests themselves run one after another, beside
# one more lane: the ASan + UBSan pass (ASAN_CI, first in the list) runs in the background from the
# start, since the others leave part of the second core idle (tests/run.sh; its output is printed
# whole at the end). test-run's recipe is marked + so the sub-makes it starts (EMU_CI, ASAN_CI)
# draw on the same job slots.
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
test:
	@scripts/setup.sh
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) test-run

test-run: $(TRAIN_BIN) $(MPI_BIN) $(CP_BINS) $(C_TEST_BINS) $(ATTN_TILE_TESTS) $(CURAND_TEST) $(ORACLE) $(BUILD)/tests/bigram_baseline \
		$(LOGITS_HARNESS)
	+@tests/run.sh $(if $(ASAN_CI),"$(ASAN_CI)") $(C_TEST_BINS) $(ATTN_TILE_TESTS) $(CURAND_RUN) "$(TORCH_PYTHON) tests/torch_oracle.py $(ORACLE)" \
		"$(TORCH_PYTHON) tests/torch_dropout_oracle.py $(ORACLE)" "$(NVCC_CI)" "$(MPI_CUDA_CI)" \
		"tests/test_bpe.sh $(BUILD)/tests/test_bpe" "$(TORCH_PYTHON) tests/test_convert.py $(ORACLE)" \
		"tests/test_export.sh $(LOGITS_HARNESS)" "$(TORCH_PYTHON) tests/test_export_torch.py" \
		"$(TORCH_PYTHON) tests/test_torch_bench.py" \
		tests/test_resume.sh tests/test_train_cli.sh tests/test_run_safety.sh tests/test_fp16_run.sh tests/test_runner.sh "$(MPI_TEST)" "$(ZERO_TEST)" "$(CP_TEST)" "$(CUDA_BUILD_CI)" "$(CUDA_ARCHS_CI)" "$(KERNELS_CI)" "$(EMU_CI)" "$(XBACKEND_CI)" "$(NCCL_EMU_CI)" "$(ARCH_CHOICE_CI)" \
		"$(KERNELS_OPS_CI)" "$(GPU_PERF_CI)" \
		"$(HELLASWAG_TEST)" "$(RECIPES_TEST)" \
		"$(FUZZ_CI)" "$(LEARN_TEST)" "$(LAYOUT_CI)" "$(BARE_CI)"

# Resume, crash and corrupted-input tests call ./train; test-asan points them at its own build.
# `make fuzz`: each libFuzzer target (tests/fuzz/) for FUZZ_SECONDS; make test runs 10 s each,
# and the whole suite once more under ASan + UBSan (test-asan: 867 s in the background of a 28-min make test on 2 AVX2 cores).
FUZZ_SECONDS ?= 60
# the trainer's CUDA sources through nvcc, and the MPI + NCCL trainer's (SKIP without them)
NVCC_CI ?= tests/check_nvcc.sh
MPI_CUDA_CI ?= tests/check_mpi_cuda.sh
FUZZ_CI ?= FUZZ_SEED=1 tests/fuzz/run.sh 10
ASAN_CI ?= pass:ASan+UBSan:$(MAKE) -s --no-print-directory test-asan
LEARN_TEST ?= tests/test_learn.sh
# HellaSwag against its float64 reference (numpy), after the emulated trainer is built (EMU_CI), so
# that its --device cuda check runs; the data recipes on their fixtures, offline
HELLASWAG_TEST ?= SEEDGPT_EMU_TRAIN=$(EMU_BUILD)/train tests/test_hellaswag.sh
RECIPES_TEST ?= tests/test_recipes.sh
# the folders' one-way dependencies (DESIGN §1): a grep over the includes, no build
LAYOUT_CI ?= tests/check_layout.sh
# a bare CUDA machine simulated: OpenBLAS, cJSON, PCRE2, zlib and MPI hidden in a private mount
# namespace, then make cuda cuda-test-bins dev-cuda and the emulated trainer in a fresh copy
BARE_CI ?= tests/check_bare_build.sh
# The CUDA side without a GPU: make cuda and the CUDA tests compile with nvcc (SKIP without it);
# the kernels and the CUDA tests run on the CPU through the emulation, plainly and under TSan
# (make test-cuda-emu); then the emulated trainer against the CPU one (train, resume across).
CUDA_BUILD_CI ?= tests/check_cuda_build.sh
# make cuda's target list (sm_70 .. sm_90 + PTX) read from one small object's fatbinary, the
# sm_80 wrappers' guards in each target's PTX, the CUDA_ARCHS override (SKIP without nvcc)
CUDA_ARCHS_CI ?= tests/check_cuda_archs.sh
# what nvcc makes of the hot kernels: ldmatrix, cp.async, no spills, mma.sync counts, a ratchet on
# PTX instructions per mma.sync (SKIP without nvcc)
KERNELS_CI ?= tests/check_kernels.sh
EMU_CI ?= $(MAKE) -s --no-print-directory test-cuda-emu
XBACKEND_CI ?= tests/cuda/test_cross_backend.sh $(EMU_BUILD)/train
# GPU ranks as processes with emulated GPUs and NCCL (make emu-nccl-bins, built by EMU_CI): the
# device sums in rank order, --init-file and mpirun starts, context parallelism on the ring
NCCL_EMU_CI ?= tests/cuda/test_nccl_emu.sh $(EMU_BUILD)
# the kernels chosen by compute capability, seen from the emulated trainer (SG_EMU_CC): the
# start-up line, bf16 refused below sm_80, a GPU below sm_70 refused
ARCH_CHOICE_CI ?= tests/cuda/test_arch_choice.sh $(EMU_BUILD)/train
# the op kernels' machine code, read without a GPU (nvcc -Xptxas -v, PTX): stack frames, 16-byte
# loads, fp64 (SKIP without nvcc); and scripts/gpu_perf.sh --dry-run through the emulation, its
# attention section and its step section (tests/test_gpu_perf.sh), so a GPU's minutes go to figures
KERNELS_OPS_CI ?= tests/check_kernels_ops.sh
GPU_PERF_CI ?= tests/test_gpu_perf.sh
fuzz: $(TRAIN_BIN)
	@tests/fuzz/run.sh $(FUZZ_SECONDS)

# `make test-asan`: the suite under ASan + UBSan (any UBSan report aborts), in build/asan. The
# learning test is skipped there (too slow under ASan; make test runs it), and so are the fuzzers
# (already sanitized).
ASAN_BUILD := build/asan
ASAN_CFLAGS := $(filter-out -O2 -O3,$(CFLAGS)) -O1 -fno-omit-frame-pointer \
               -fsanitize=address,undefined -fno-sanitize-recover=undefined
test-asan:
	@SEEDGPT_TRAIN=$(ASAN_BUILD)/train $(MAKE) --no-print-directory test-run BUILD=$(ASAN_BUILD) \
		TRAIN_BIN=$(ASAN_BUILD)/train CFLAGS="$(ASAN_CFLAGS)" ASAN_CI= \
		FUZZ_CI="echo SKIP fuzz: make test runs the fuzzers, which are sanitized themselves" \
		LEARN_TEST="echo SKIP learns_kjv_below_bigram_baseline: too slow under ASan, make test runs it" \
		MPI_BIN= MPI_TEST="echo SKIP mpi: make test runs the data-parallel tests, OpenMPI is not built for ASan" \
		CP_TEST="echo SKIP cp: make test runs the context-parallel tests, OpenMPI is not built for ASan" \
		ZERO_TEST="echo SKIP zero: make test runs the ZeRO-1 tests, OpenMPI is not built for ASan" \
		CUDA_BUILD_CI="echo SKIP cuda_build: make test builds the CUDA code, ASan adds nothing to nvcc" \
		NVCC_CI="echo SKIP check_nvcc: make test compiles the CUDA sources, ASan adds nothing to nvcc" \
		MPI_CUDA_CI="echo SKIP check_mpi_cuda: make test compiles the MPI + NCCL trainer, ASan adds nothing to nvcc" \
		CUDA_ARCHS_CI="echo SKIP cuda_archs: make test reads the CUDA targets, ASan adds nothing to nvcc" \
		KERNELS_CI="echo SKIP check_kernels: make test reads the output of nvcc, ASan adds nothing to it" \
		EMU_CI="echo SKIP test-cuda-emu: make test runs the emulated kernels, plainly and under ThreadSanitizer" \
		XBACKEND_CI="echo SKIP cross_backend: make test runs the emulated trainer" \
		NCCL_EMU_CI="echo SKIP nccl_emu: make test runs the emulated GPU ranks, OpenMPI is not built for ASan" \
		ARCH_CHOICE_CI="echo SKIP arch_choice: make test runs the emulated trainer" \
		KERNELS_OPS_CI="echo SKIP check_kernels_ops: make test reads the kernels, ASan adds nothing to nvcc" \
		GPU_PERF_CI="echo SKIP gpu_perf_dry_run: make test runs it in the emulation" \
		LAYOUT_CI="echo SKIP layout: make test checks the includes, a sanitizer adds nothing" \
		BARE_CI="echo SKIP bare_build: make test builds the CUDA code bare, ASan adds nothing"

# `make mutants`: mutation testing, the proof that the suite catches planted bugs. Each
# tests/mutants/*.patch is one small bug; tests/mutants/run.sh applies it to a copy of the tree,
# rebuilds and runs the tests its header names, and reverts it. Ends with "N killed, N survived"
# and fails if any survived. Not part of make test (149 patches; 1-207 s each, median 13 s, 53 min in all on 2 cores); MUTANT=NAME runs only the
# mutants whose name contains NAME.
.PHONY: mutants
mutants:
	@tests/mutants/run.sh $(if $(MUTANT),"$(MUTANT)")

setup:
	@scripts/setup.sh

# `make verify`: the teaching table of recompute and dropout (docs/recompute-and-dropout.md).
verify: $(BUILD)/verify
	@$(BUILD)/verify

$(BUILD)/verify: tests/verify.c $(CORE_OBJ) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(CORE_OBJ) $(LDLIBS)

# The first run: the King James Bible, a small model, a few minutes on 2 cores.
kjv:
	@scripts/setup.sh
	@$(MAKE) --no-print-directory train
	@scripts/kjv.sh

# `make demo`: the README's first command (scripts/demo.sh; DEMO_STEPS=N shortens it).
demo:
	@scripts/setup.sh
	@$(MAKE) --no-print-directory train
	@scripts/demo.sh

# `make plot RUN=DIR`: the loss and learning-rate curves of a run folder.
plot:
	@test -n "$(RUN)" || { echo "usage: make plot RUN=DIR (a run folder with log.jsonl)"; exit 2; }
	@scripts/plot.sh "$(RUN)"

# ---- CUDA ----------------------------------------------------------------------------------
# The .cu sources (cuda/, the CUDA backend; attention/, beside their CPU twins) build two ways:
# with nvcc for a GPU, and as C++ with -DSG_EMU against the emulation (cuda/emu/cuda_emu.h,
# cuda/emu/cuda_emu.cpp) so that CI runs every kernel on the CPU. model/backend.c is compiled once more with SEEDGPT_CUDA to
# add the CUDA table. Tests of CUDA code are tests/cuda/test_*.cu; each builds both ways too.
CUDA_SRC      := $(sort $(wildcard attention/*.cu cuda/*.cu))
CUDA_TEST_SRC := $(sort $(wildcard tests/cuda/test_*.cu))
CUDA_HEADERS  := $(HEADERS) $(wildcard cuda/*.h cuda/emu/*.h tests/cuda/*.h)
# The GPUs one ./train_cuda runs on: machine code (SASS) for each compute capability of
# CUDA_ARCHS (V100, T4, A100, A10 / RTX 30, L4 / RTX 40, H100 / H200), plus the PTX of the last,
# which the driver compiles for a GPU newer than all of them. An SASS runs on the same major at the
# same or a higher minor. CUDA_ARCHS=90 builds one target (CI, a quick build), in build dirs of its
# own (build/cuda-sm90/...), so the two never mix. A target this nvcc cannot build (CUDA 13 dropped
# sm_70) is left out and named by `make cuda` and `make config`; cuda/arch.cu is told what was built
# (the start-up line, and a GPU without code refused in one line).
CUDA_ARCHS_ALL := 70 75 80 86 89 90
CUDA_ARCHS    ?= $(CUDA_ARCHS_ALL)
# what this nvcc can build, asked once and only by the CUDA rules (empty: it cannot say; all kept)
NVCC_CODES     = $(eval NVCC_CODES := $$(patsubst sm_%,%,$$(filter sm_%,$$(shell $(NVCC) --list-gpu-code 2>/dev/null))))$(NVCC_CODES)
CUDA_ARCHS_BUILT = $(if $(NVCC_CODES),$(filter $(NVCC_CODES),$(CUDA_ARCHS)),$(CUDA_ARCHS))
CUDA_ARCHS_LEFT_OUT = $(filter-out $(CUDA_ARCHS_BUILT),$(CUDA_ARCHS))
CUDA_PTX_ARCH  = $(lastword $(CUDA_ARCHS_BUILT))
NVCC_ARCH     ?= $(foreach a,$(CUDA_ARCHS_BUILT),-gencode arch=compute_$(a),code=sm_$(a)) \
                 -gencode arch=compute_$(CUDA_PTX_ARCH),code=compute_$(CUDA_PTX_ARCH)
# (every .cu gets them; cuda/arch.cu reads them)
NVCC_ARCH_DEFS = -DSG_CUDA_SASS='"$(CUDA_ARCHS_BUILT)"' -DSG_CUDA_PTX=$(CUDA_PTX_ARCH)
# the default set builds in build/cuda, any other in build/cuda-smXX-YY (and dev_cuda, mpi_cuda)
CUDA_ARCH_TAG := $(if $(filter-out $(CUDA_ARCHS_ALL),$(CUDA_ARCHS))$(filter-out $(CUDA_ARCHS),$(CUDA_ARCHS_ALL)),-sm$(subst $(eval) ,-,$(strip $(CUDA_ARCHS))))
NVCCFLAGS     ?= -O3 -std=c++17 -I. $(NVCC_ARCH) -Xcompiler -fopenmp -lineinfo
# the register / shared memory / spill report of every kernel, printed by the build
NVCC_PTXAS    ?= -Xptxas -v
CUDA_LIBS     := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcublasLt -lcudart -lstdc++
# nvcc links the CUDA tests and does not take gcc's -Wl,a,b: it passes -Xlinker=a,b on instead
comma         := ,
NVCC_LDLIBS   := $(subst -Wl$(comma),-Xlinker=,$(LDLIBS))
CUDA_BUILD    := $(BUILD)/cuda$(CUDA_ARCH_TAG)
CUDA_OBJ      := $(CUDA_SRC:%.cu=$(CUDA_BUILD)/%.o)
CUDA_CORE_OBJ := $(filter-out $(BUILD)/model/backend.o,$(CORE_OBJ)) $(CUDA_BUILD)/model/backend.o

.PHONY: cuda test-cuda test-cuda-emu cuda-archs FORCE
cuda: train_cuda
	@$(if $(CUDA_ARCHS_LEFT_OUT),echo "make cuda: $(NVCC) cannot build $(addprefix sm_,$(CUDA_ARCHS_LEFT_OUT)) (CUDA 13 dropped Volta); ./train_cuda holds $(addprefix sm_,$(CUDA_ARCHS_BUILT)) + PTX compute_$(CUDA_PTX_ARCH)",true)
# the targets the build takes here and the flags they become (tests/check_cuda_archs.sh reads them)
cuda-archs:
	@echo "CUDA_ARCHS_BUILT=$(CUDA_ARCHS_BUILT)"
	@echo "CUDA_ARCHS_LEFT_OUT=$(CUDA_ARCHS_LEFT_OUT)"
	@echo "CUDA_PTX_ARCH=$(CUDA_PTX_ARCH)"
	@echo "NVCC_ARCH=$(strip $(NVCC_ARCH))"
# the folder of this target set's objects (scripts/gpu_check.sh, scripts/gpu_perf.sh)
.PHONY: cuda-build-dir
cuda-build-dir:
	@echo "$(CUDA_BUILD)"
# ./train_cuda is relinked when the target set changes (its objects live in a folder per set)
CUDA_ARCHS_STAMP := $(BUILD)/cuda_archs.stamp
$(CUDA_ARCHS_STAMP): FORCE
	@mkdir -p $(dir $@)
	@echo '$(CUDA_ARCHS_BUILT)' | cmp -s - $@ || echo '$(CUDA_ARCHS_BUILT)' > $@
FORCE:

train_cuda: $(CUDA_BUILD)/train.o $(BUILD)/cli.o $(CUDA_CORE_OBJ) $(CUDA_OBJ) $(CUDA_ARCHS_STAMP)
	$(CC) $(CFLAGS) -o $@ $(filter-out $(CUDA_ARCHS_STAMP),$^) $(LDLIBS) $(CUDA_LIBS)

$(CUDA_BUILD)/train.o: train.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DSEEDGPT_CUDA -c -o $@ $<

$(CUDA_BUILD)/model/backend.o: model/backend.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DSEEDGPT_CUDA -c -o $@ $<

$(CUDA_BUILD)/%.o: %.cu $(CUDA_HEADERS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(NVCC_ARCH_DEFS) $(NVCC_PTXAS) -c -o $@ $<

# Tests of tests/cuda/ that include model/ headers or the CUDA backend's ops (cuda/ops_*.h) need
# the model's kernels and the core; the others (test_cuda_emu: the device subset itself, test_cublas: cuBLAS conventions) need only the
# runtime. While a kernel source the CUDA backend names (model/backend.c) is not written yet, the
# tests that need it are reported as SKIP instead of failing to link.
CUDA_TEST_MODEL_SRC := $(shell grep -l -e '"model/' -e '"cuda/ops_' $(CUDA_TEST_SRC) /dev/null 2>/dev/null)
# The attention's test links the attention alone: its kernel and its CPU twin (test build).
CUDA_TEST_ATTN_SRC  := tests/cuda/test_cuda_attention.cu
CUDA_TEST_ALONE_SRC := $(filter-out $(CUDA_TEST_MODEL_SRC) $(CUDA_TEST_ATTN_SRC),$(CUDA_TEST_SRC))
# tensor-core tiles held to the CPU attention: they link attention/flash_cpu.c, not flash_cuda.cu
CUDA_TEST_TC_SRC    := tests/cuda/test_cuda_mma_scores.cu
CUDA_TEST_ALONE_SRC := $(filter-out $(CUDA_TEST_TC_SRC),$(CUDA_TEST_ALONE_SRC))
# the tensor-core attention (attention/flash_tc.cu: bf16, and fp16 for sm_75) against the CPU attention
CUDA_TEST_FTC_SRC   := tests/cuda/test_cuda_flash_tc.cu tests/cuda/test_cuda_flash_f16.cu
CUDA_TEST_ALONE_SRC := $(filter-out $(CUDA_TEST_FTC_SRC),$(CUDA_TEST_ALONE_SRC))
CUDA_KERNELS_NEEDED := cuda/ops_cuda.cu cuda/device_memory.cu attention/flash_cuda.cu
CUDA_KERNELS_MISSING := $(filter-out $(CUDA_SRC),$(CUDA_KERNELS_NEEDED))
CUDA_REF_OBJ := $(patsubst %.c,$(BUILD)/test/%.o,$(filter tests/ref_%.c,$(wildcard tests/*.c)))

# make test-cuda: the CUDA tests on a real GPU (test objects of the core: CPU twins as reference)
CUDA_TEST_ALONE_BINS := $(CUDA_TEST_ALONE_SRC:tests/cuda/%.cu=$(CUDA_BUILD)/tests/%)
CUDA_TEST_MODEL_BINS := $(CUDA_TEST_MODEL_SRC:tests/cuda/%.cu=$(CUDA_BUILD)/tests/%)
CUDA_TEST_CORE := $(filter-out $(BUILD)/test/model/backend.o,$(TEST_OBJ)) $(CUDA_BUILD)/test/model/backend.o
$(CUDA_BUILD)/test/model/backend.o: model/backend.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DSEEDGPT_TEST_BUILD -DSEEDGPT_CUDA -c -o $@ $<
$(CUDA_TEST_ALONE_BINS): $(CUDA_BUILD)/tests/%: tests/cuda/%.cu $(CUDA_HEADERS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -DSEEDGPT_TEST_BUILD -o $@ $< -lcublas -lcublasLt
$(CUDA_TEST_MODEL_BINS): $(CUDA_BUILD)/tests/%: tests/cuda/%.cu $(CUDA_OBJ) $(CUDA_TEST_CORE) $(CUDA_HEADERS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -DSEEDGPT_TEST_BUILD -o $@ $< $(CUDA_OBJ) $(CUDA_TEST_CORE) \
		$(filter tests/ref_%.c,$(wildcard tests/*.c)) -Xcompiler -fopenmp $(NVCC_LDLIBS) -lcublas -lcublasLt
CUDA_TEST_ATTN_BINS := $(CUDA_BUILD)/tests/test_cuda_attention
$(CUDA_BUILD)/tests/test_cuda_attention: tests/cuda/test_cuda_attention.cu $(CUDA_BUILD)/attention/flash_cuda.o \
		$(BUILD)/test/attention/flash_cpu.o $(CUDA_HEADERS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -DSEEDGPT_TEST_BUILD -o $@ $< $(CUDA_BUILD)/attention/flash_cuda.o \
		$(BUILD)/test/attention/flash_cpu.o -Xcompiler -fopenmp -lgomp -lm
CUDA_TEST_TC_BINS := $(CUDA_TEST_TC_SRC:tests/cuda/%.cu=$(CUDA_BUILD)/tests/%)
$(CUDA_TEST_TC_BINS): $(CUDA_BUILD)/tests/%: tests/cuda/%.cu $(BUILD)/test/attention/flash_cpu.o $(CUDA_HEADERS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -DSEEDGPT_TEST_BUILD -o $@ $< $(BUILD)/test/attention/flash_cpu.o \
		-Xcompiler -fopenmp -lgomp -lm
CUDA_TEST_FTC_BINS := $(CUDA_TEST_FTC_SRC:tests/cuda/%.cu=$(CUDA_BUILD)/tests/%)
# (flash_tc.o's fp32-interface wrappers call flash_cuda.o's kernels and cuda/device_memory.o's allocator)
$(CUDA_TEST_FTC_BINS): $(CUDA_BUILD)/tests/%: tests/cuda/%.cu $(CUDA_BUILD)/attention/flash_tc.o \
		$(CUDA_BUILD)/attention/flash_cuda.o $(CUDA_BUILD)/cuda/device_memory.o \
		$(BUILD)/test/attention/flash_cpu.o $(BUILD)/test/attention/flash_bf16_cpu.o $(CUDA_HEADERS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -DSEEDGPT_TEST_BUILD -o $@ $< $(CUDA_BUILD)/attention/flash_tc.o \
		$(CUDA_BUILD)/attention/flash_cuda.o $(CUDA_BUILD)/cuda/device_memory.o \
		$(BUILD)/test/attention/flash_cpu.o $(BUILD)/test/attention/flash_bf16_cpu.o -Xcompiler -fopenmp -lgomp -lm
# the attention's speed on a GPU (scripts/gpu_check.sh): fwd + bwd ms and TFLOP/s, not a test
BENCH_ATTN_OBJ := $(CUDA_BUILD)/attention/flash_cuda.o $(CUDA_BUILD)/attention/flash_tc.o $(CUDA_BUILD)/cuda/device_memory.o
$(CUDA_BUILD)/bench_attention_cuda: tests/cuda/bench_attention_cuda.cu $(BENCH_ATTN_OBJ) $(CUDA_HEADERS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -o $@ $< $(BENCH_ATTN_OBJ)
# the step's ops, old kernels against new, and its GEMM problems (scripts/gpu_perf_step.sh), not a test
BENCH_OPS_OBJ := $(CUDA_BUILD)/cuda/ops_cuda.o $(CUDA_BUILD)/cuda/ops_bf16_cuda.o $(CUDA_BUILD)/cuda/device_memory.o
$(CUDA_BUILD)/bench_ops_cuda: tests/cuda/bench_ops_cuda.cu $(BENCH_OPS_OBJ) $(CUDA_HEADERS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -o $@ $< $(BENCH_OPS_OBJ) -lcublas -lcublasLt
ifeq ($(CUDA_KERNELS_MISSING),)
CUDA_TEST_BINS := $(CUDA_TEST_ALONE_BINS) $(CUDA_TEST_ATTN_BINS) $(CUDA_TEST_MODEL_BINS)
CUDA_TEST_RUN := $(CUDA_TEST_BINS)
else
CUDA_TEST_BINS := $(CUDA_TEST_ALONE_BINS) $(CUDA_TEST_ATTN_BINS)
CUDA_TEST_RUN := $(CUDA_TEST_BINS) $(foreach t,$(CUDA_TEST_MODEL_SRC),"echo SKIP $(notdir $(t:.cu=)): \
	$(CUDA_KERNELS_MISSING) not written yet")
endif
CUDA_TEST_BINS += $(CUDA_TEST_TC_BINS) $(CUDA_TEST_FTC_BINS)
CUDA_TEST_RUN  += $(CUDA_TEST_TC_BINS) $(CUDA_TEST_FTC_BINS)
test-cuda: train_cuda $(CUDA_TEST_BINS)
	@tests/run.sh $(CUDA_TEST_RUN) "tests/cuda/test_cross_backend.sh ./train_cuda"
.PHONY: cuda-test-bins
# (with the attention benchmark of scripts/gpu_check.sh, so that CI compiles it too)
cuda-test-bins: $(CUDA_TEST_BINS) $(CUDA_BUILD)/bench_attention_cuda $(CUDA_BUILD)/bench_ops_cuda

# make test-cuda-emu: the same kernel and test sources as C++ on the CPU (cuda/emu/cuda_emu.h),
# run once plainly and then, built with ThreadSanitizer (make test-cuda-emu-tsan), with two
# blocks at a time so that races between blocks and missing barriers are reported.
EMU_CXX       ?= g++
EMU_CXXFLAGS  ?= -O2 -g
EMU_FLAGS     := -std=c++17 -DSG_EMU -I. -pthread -fopenmp -Wall -Wno-unknown-pragmas -Wno-unused-parameter \
                 $(filter -DSEEDGPT_NO_%,$(CFLAGS))
EMU_BUILD     ?= $(BUILD)/emu
EMU_RT_OBJ    := $(EMU_BUILD)/cuda/emu/cuda_emu_rt.o
EMU_OBJ       := $(CUDA_SRC:%.cu=$(EMU_BUILD)/%.o)
EMU_ALONE_BINS := $(CUDA_TEST_ALONE_SRC:tests/cuda/%.cu=$(EMU_BUILD)/tests/%)
EMU_MODEL_BINS := $(CUDA_TEST_MODEL_SRC:tests/cuda/%.cu=$(EMU_BUILD)/tests/%)
$(EMU_RT_OBJ): cuda/emu/cuda_emu.cpp $(CUDA_HEADERS)
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_FLAGS) -c -o $@ $<
$(EMU_BUILD)/%.o: %.cu $(CUDA_HEADERS)
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_FLAGS) -x c++ -c -o $@ $<
$(EMU_BUILD)/tests/%.o: tests/cuda/%.cu $(CUDA_HEADERS)
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_FLAGS) -DSEEDGPT_TEST_BUILD -x c++ -c -o $@ $<
$(EMU_ALONE_BINS): $(EMU_BUILD)/tests/%: $(EMU_BUILD)/tests/%.o $(EMU_RT_OBJ)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_FLAGS) -o $@ $^ $(LDLIBS)
$(EMU_MODEL_BINS): $(EMU_BUILD)/tests/%: $(EMU_BUILD)/tests/%.o $(EMU_OBJ) $(EMU_RT_OBJ) $(CUDA_TEST_CORE) $(CUDA_REF_OBJ)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_FLAGS) -o $@ $^ $(LDLIBS)
# test_cuda_peak includes cuda/device_peak.cu itself, so it links only the runtime
$(CUDA_BUILD)/tests/test_cuda_peak $(EMU_BUILD)/tests/test_cuda_peak.o: cuda/device_peak.cu
$(CUDA_BUILD)/tests/test_cuda_arch $(EMU_BUILD)/tests/test_cuda_arch.o: cuda/arch.cu
# test_cuda_fp16_ops is test_cuda_bf16_ops compiled for fp16
$(CUDA_BUILD)/tests/test_cuda_fp16_ops $(EMU_BUILD)/tests/test_cuda_fp16_ops.o: tests/cuda/test_cuda_bf16_ops.cu
EMU_ATTN_BINS := $(EMU_BUILD)/tests/test_cuda_attention
$(EMU_BUILD)/tests/test_cuda_attention: $(EMU_BUILD)/tests/test_cuda_attention.o $(EMU_BUILD)/attention/flash_cuda.o \
		$(EMU_RT_OBJ) $(BUILD)/test/attention/flash_cpu.o
	$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_FLAGS) -o $@ $^ $(LDLIBS)
EMU_TC_BINS := $(CUDA_TEST_TC_SRC:tests/cuda/%.cu=$(EMU_BUILD)/tests/%)
$(EMU_TC_BINS): $(EMU_BUILD)/tests/%: $(EMU_BUILD)/tests/%.o $(EMU_RT_OBJ) $(BUILD)/test/attention/flash_cpu.o
	$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_FLAGS) -o $@ $^ $(LDLIBS)
EMU_FTC_BINS := $(CUDA_TEST_FTC_SRC:tests/cuda/%.cu=$(EMU_BUILD)/tests/%)
$(EMU_FTC_BINS): $(EMU_BUILD)/tests/%: $(EMU_BUILD)/tests/%.o $(EMU_BUILD)/attention/flash_tc.o \
		$(EMU_BUILD)/attention/flash_cuda.o $(EMU_BUILD)/cuda/device_memory.o $(EMU_RT_OBJ) \
		$(BUILD)/test/attention/flash_cpu.o $(BUILD)/test/attention/flash_bf16_cpu.o
	$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_FLAGS) -o $@ $^ $(LDLIBS)
# the attention benchmark in the emulation: scripts/gpu_check.sh --dry-run runs it at a tiny shape
$(EMU_BUILD)/bench_attention_cuda: $(EMU_BUILD)/tests/bench_attention_cuda.o $(EMU_BUILD)/attention/flash_cuda.o \
		$(EMU_BUILD)/attention/flash_tc.o $(EMU_BUILD)/cuda/device_memory.o $(EMU_RT_OBJ)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_FLAGS) -o $@ $^ $(LDLIBS)
# the ops benchmark in the emulation: scripts/gpu_perf.sh --dry-run runs it at a tiny shape
$(EMU_BUILD)/bench_ops_cuda: $(EMU_BUILD)/tests/bench_ops_cuda.o $(EMU_BUILD)/cuda/ops_cuda.o \
		$(EMU_BUILD)/cuda/ops_bf16_cuda.o $(EMU_BUILD)/cuda/device_memory.o $(EMU_RT_OBJ)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_FLAGS) -o $@ $^ $(LDLIBS)
# the trainer itself with the emulated CUDA backend: ./train --device cuda, slowly, on the CPU
$(EMU_BUILD)/train: $(CUDA_BUILD)/train.o $(BUILD)/cli.o $(CUDA_CORE_OBJ) $(EMU_OBJ) $(EMU_RT_OBJ)
	$(EMU_CXX) $(EMU_FLAGS) -o $@ $^ $(LDLIBS)
ifeq ($(CUDA_KERNELS_MISSING),)
EMU_TEST_BINS := $(EMU_ALONE_BINS) $(EMU_ATTN_BINS) $(EMU_MODEL_BINS)
EMU_TEST_RUN  := $(EMU_TEST_BINS)
EMU_TRAIN     := $(EMU_BUILD)/train
else
EMU_TEST_BINS := $(EMU_ALONE_BINS) $(EMU_ATTN_BINS)
EMU_TEST_RUN  := $(EMU_TEST_BINS) $(foreach t,$(CUDA_TEST_MODEL_SRC),"echo SKIP $(notdir $(t:.cu=)): \
	$(CUDA_KERNELS_MISSING) not written yet")
EMU_TRAIN     :=
endif
EMU_TEST_BINS += $(EMU_TC_BINS) $(EMU_FTC_BINS)
EMU_TEST_RUN  += $(EMU_TC_BINS) $(EMU_FTC_BINS)
# The ThreadSanitizer subset: the tests that launch kernels one op at a time. test_cublas and
# test_cuda_arch launch none; test_cuda_model and test_cuda_cp run the same kernels again as whole steps and
# take minutes under TSan (make test-cuda-emu-tsan EMU_TSAN_TESTS="test_cuda_model" runs it).
EMU_TSAN_BUILD := $(BUILD)/emu-tsan
EMU_TSAN_TESTS ?= $(filter-out test_cublas test_cuda_arch test_cuda_model test_cuda_cp,$(notdir $(EMU_TEST_BINS)))
EMU_TSAN_ENV   := SG_EMU_CONCURRENT_BLOCKS=2 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
                  TSAN_OPTIONS="halt_on_error=0 exitcode=66 report_signal_unsafe=0"
.PHONY: emu-test-bins test-cuda-emu-tsan
emu-test-bins: $(EMU_TEST_BINS) $(EMU_TRAIN)
test-cuda-emu: test-cuda-emu-plain
	@$(MAKE) --no-print-directory test-cuda-emu-tsan
# the plain half alone (scripts/gpu_check.sh --dry-run runs it in place of make test-cuda)
.PHONY: test-cuda-emu-plain
test-cuda-emu-plain: emu-test-bins
	@tests/run.sh $(EMU_TEST_RUN) $(DEV_CUDA_EMU_BINS)
test-cuda-emu-tsan:
	@$(MAKE) --no-print-directory EMU_BUILD=$(EMU_TSAN_BUILD) EMU_CXXFLAGS="-O1 -g -fsanitize=thread" \
		$(EMU_TSAN_TESTS:%=$(EMU_TSAN_BUILD)/tests/%)
	@$(EMU_TSAN_ENV) tests/run.sh $(EMU_TSAN_TESTS:%=$(EMU_TSAN_BUILD)/tests/%)

# ---- dev/cuda: kernel variants per op, validated and timed (dev/cuda/README.md) -------------
# One program per op. make dev-cuda: the nvcc builds in build/dev_cuda/ (each runs its variants
# on a GPU: ./build/dev_cuda/layernorm_forward [K]); scripts/dev_cuda_bench.sh runs them all at
# GPT-2 124M shapes. make dev-cuda-emu: the same sources against the emulation, which run only
# their validation, at tiny shapes, one ok/FAIL line per variant. Every program links the
# production kernels it measures (cuda/ops_cuda.cu, cuda/ops_bf16_cuda.cu, attention/*.cu) and
# the CPU attention.
DEV_CUDA_OPS       := layernorm_forward residual_dropout_forward attention_forward attention_backward \
                      matmul_forward gelu_forward crossentropy_forward
DEV_CUDA_BUILD     := $(BUILD)/dev_cuda$(CUDA_ARCH_TAG)
DEV_CUDA_BINS      := $(DEV_CUDA_OPS:%=$(DEV_CUDA_BUILD)/%)
DEV_CUDA_EMU_BINS  := $(DEV_CUDA_OPS:%=$(EMU_BUILD)/dev_cuda/%)
DEV_CUDA_KERNELS   := cuda/ops_cuda cuda/ops_bf16_cuda cuda/device_memory attention/flash_cuda \
                      attention/flash_tc
DEV_CUDA_OBJ       := $(DEV_CUDA_KERNELS:%=$(CUDA_BUILD)/%.o) $(BUILD)/attention/flash_cpu.o
DEV_CUDA_EMU_OBJ   := $(DEV_CUDA_KERNELS:%=$(EMU_BUILD)/%.o) $(EMU_RT_OBJ) $(BUILD)/attention/flash_cpu.o
DEV_CUDA_HEADERS   := $(CUDA_HEADERS) dev/cuda/common.h
.PHONY: dev-cuda dev-cuda-emu
dev-cuda: $(DEV_CUDA_BINS)
$(DEV_CUDA_BUILD)/%: dev/cuda/%.cu $(DEV_CUDA_OBJ) $(DEV_CUDA_HEADERS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -o $@ $< $(DEV_CUDA_OBJ) -Xcompiler -fopenmp -lgomp -lm -lcublas -lcublasLt
$(EMU_BUILD)/dev_cuda/%: dev/cuda/%.cu $(DEV_CUDA_EMU_OBJ) $(DEV_CUDA_HEADERS)
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_FLAGS) -x c++ -o $@ $< -x none $(DEV_CUDA_EMU_OBJ) $(LDLIBS)
dev-cuda-emu: $(DEV_CUDA_EMU_BINS)
	@tests/run.sh $(DEV_CUDA_EMU_BINS)
# make test-cuda-emu runs them with the emulated tests (plainly; not under ThreadSanitizer)
emu-test-bins: $(DEV_CUDA_EMU_BINS)

# ---- data parallelism (dist/dist.h) -----------------------------------------------------------
# ./train_mpi: the CPU trainer with dist/dist_mpi.c in place of dist/dist_none.c, linked by mpicc
# (Debian: libopenmpi-dev, openmpi-bin). make test builds and runs it (tests/test_mpi.sh) where
# mpicc exists; the test prints SKIP lines where it does not.
MPI_BUILD := $(BUILD)/mpi
MPI_CORE_OBJ := $(filter-out $(BUILD)/dist/dist_none.o,$(CORE_OBJ))
.PHONY: mpi mpi-cuda mpi-cuda-check
ifeq ($(HAVE_MPI),1)
mpi: train_mpi
else
mpi:
	@echo "make mpi: $(MPICC) cannot build an MPI program here (Debian: libopenmpi-dev, openmpi-bin); ./train_mpi is not built"; exit 2
endif

train_mpi: $(BUILD)/train.o $(BUILD)/cli.o $(MPI_CORE_OBJ) $(MPI_BUILD)/dist/dist_mpi.o
	$(MPICC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(MPI_BUILD)/dist/dist_mpi.o: dist/dist_mpi.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) -c -o $@ $<

# Test builds of the trainers (SEEDGPT_TEST_BUILD: NaN-filled scratch, the keep-bit export, the
# planted recompute leak, allocation counts in the JSON log) for tests/test_cp.sh.
TEST_TRAIN_BINS := $(BUILD)/tests/train_test $(if $(filter 1,$(HAVE_MPI)),$(BUILD)/tests/train_mpi_test)
$(BUILD)/tests/train_test: $(BUILD)/test/train.o $(BUILD)/test/cli.o $(TEST_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/tests/train_mpi_test: $(BUILD)/test/train.o $(BUILD)/test/cli.o \
		$(filter-out $(BUILD)/test/dist/dist_none.o,$(TEST_OBJ)) $(MPI_BUILD)/dist/dist_mpi.o
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# NCCL (shipped with the CUDA toolkit here: $(CUDA_HOME)/include/nccl.h) sums gradients in device
# memory; the NCCL id travels over MPI. mpi-cuda-check compiles the two dist files and links them
# with tests/dist_link_check.c, without the rest of the CUDA build; mpi-cuda is the whole trainer.
NCCL_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lnccl -lcudart -lstdc++
MPI_CUDA_BUILD := $(BUILD)/mpi_cuda$(CUDA_ARCH_TAG)
$(MPI_CUDA_BUILD)/dist/dist_mpi.o: dist/dist_mpi.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) -DSEEDGPT_NCCL=1 -c -o $@ $<
$(MPI_CUDA_BUILD)/dist/dist_nccl.o: dist/dist_nccl.cu $(CUDA_HEADERS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -DSEEDGPT_NCCL=1 -c -o $@ $<
$(MPI_CUDA_BUILD)/dist_link_check: tests/dist_link_check.c $(MPI_CUDA_BUILD)/dist/dist_mpi.o \
		$(MPI_CUDA_BUILD)/dist/dist_nccl.o $(HEADERS)
	$(MPICC) $(CFLAGS) -o $@ $< $(MPI_CUDA_BUILD)/dist/dist_mpi.o $(MPI_CUDA_BUILD)/dist/dist_nccl.o \
		$(NCCL_LIBS)
mpi-cuda-check: $(MPI_CUDA_BUILD)/dist_link_check
mpi-cuda: train_mpi_cuda
train_mpi_cuda: $(CUDA_BUILD)/train.o $(BUILD)/cli.o $(filter-out $(BUILD)/dist/dist_none.o,$(CUDA_CORE_OBJ)) \
		$(CUDA_OBJ) \
		$(MPI_CUDA_BUILD)/dist/dist_mpi.o $(MPI_CUDA_BUILD)/dist/dist_nccl.o
	$(MPICC) $(CFLAGS) -o $@ $^ $(LDLIBS) $(CUDA_LIBS) $(NCCL_LIBS)

# ./train_cuda_nccl: GPU ranks started without MPI, by any launcher, with --rank, --world and
# --init-file PATH (dist/dist_nccl_file.c: the NCCL id through a shared file, dist/init_file.c;
# every reduction through NCCL). cuda-nccl-check compiles and links its dist files alone, with
# tests/dist_link_check.c (tests/check_mpi_cuda.sh, part of make test).
NCCL_FILE_BUILD := $(BUILD)/nccl_file
$(NCCL_FILE_BUILD)/dist/dist_nccl_file.o: dist/dist_nccl_file.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DSEEDGPT_NCCL=1 -c -o $@ $<
$(NCCL_FILE_BUILD)/nccl_file_link_check: tests/dist_link_check.c $(NCCL_FILE_BUILD)/dist/dist_nccl_file.o \
		$(MPI_CUDA_BUILD)/dist/dist_nccl.o $(BUILD)/dist/init_file.o $(HEADERS)
	$(CC) $(CFLAGS) -o $@ $< $(NCCL_FILE_BUILD)/dist/dist_nccl_file.o $(MPI_CUDA_BUILD)/dist/dist_nccl.o \
		$(BUILD)/dist/init_file.o $(NCCL_LIBS)
cuda-nccl-check: $(NCCL_FILE_BUILD)/nccl_file_link_check
cuda-nccl: train_cuda_nccl
train_cuda_nccl: $(CUDA_BUILD)/train.o $(BUILD)/cli.o $(filter-out $(BUILD)/dist/dist_none.o,$(CUDA_CORE_OBJ)) \
		$(CUDA_OBJ) $(NCCL_FILE_BUILD)/dist/dist_nccl_file.o $(MPI_CUDA_BUILD)/dist/dist_nccl.o
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) $(CUDA_LIBS) $(NCCL_LIBS)

# NCCL emulated between processes of this machine (cuda/emu/nccl_emu.h), each rank with an
# emulated GPU: the ranks' sums alone (tests/cuda/nccl_ranks.cu), the trainer started with
# --init-file (dist/dist_nccl_file.c), and under mpirun (dist/dist_mpi.c, where mpicc exists);
# tests/cuda/test_nccl_emu.sh runs them
EMU_NCCL_OBJ := $(EMU_BUILD)/dist/dist_nccl.o $(EMU_BUILD)/cuda/emu/nccl_emu.o
$(EMU_BUILD)/cuda/emu/nccl_emu.o: cuda/emu/nccl_emu.cpp $(CUDA_HEADERS)
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_FLAGS) -c -o $@ $<
$(EMU_BUILD)/dist/dist_nccl.o: dist/dist_nccl.cu $(CUDA_HEADERS)
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_FLAGS) -DSEEDGPT_NCCL=1 -x c++ -c -o $@ $<
$(EMU_BUILD)/nccl_ranks: tests/cuda/nccl_ranks.cu $(NCCL_FILE_BUILD)/dist/dist_nccl_file.o $(BUILD)/dist/init_file.o \
		$(EMU_NCCL_OBJ) $(EMU_RT_OBJ) $(CUDA_HEADERS)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_FLAGS) -x c++ -o $@ $< -x none $(filter %.o,$^) $(LDLIBS)
$(EMU_BUILD)/train_cuda_nccl: $(CUDA_BUILD)/train.o $(BUILD)/cli.o $(filter-out $(BUILD)/dist/dist_none.o,$(CUDA_CORE_OBJ)) \
		$(EMU_OBJ) $(EMU_RT_OBJ) $(NCCL_FILE_BUILD)/dist/dist_nccl_file.o $(EMU_NCCL_OBJ)
	$(EMU_CXX) $(EMU_FLAGS) -o $@ $^ $(LDLIBS)
$(EMU_BUILD)/train_mpi_cuda: $(CUDA_BUILD)/train.o $(BUILD)/cli.o $(filter-out $(BUILD)/dist/dist_none.o,$(CUDA_CORE_OBJ)) \
		$(EMU_OBJ) $(EMU_RT_OBJ) $(MPI_CUDA_BUILD)/dist/dist_mpi.o $(EMU_NCCL_OBJ)
	$(MPICC) -pthread -fopenmp -o $@ $^ $(LDLIBS) -lstdc++
EMU_NCCL_BINS := $(EMU_BUILD)/nccl_ranks $(EMU_BUILD)/train_cuda_nccl $(if $(filter 1,$(HAVE_MPI)),$(EMU_BUILD)/train_mpi_cuda)
.PHONY: emu-nccl-bins
emu-nccl-bins: $(EMU_NCCL_BINS)
emu-test-bins: $(EMU_NCCL_BINS)

clean:
	rm -rf $(BUILD) train train_cuda train_mpi train_mpi_cuda train_cuda_nccl
