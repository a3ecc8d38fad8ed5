# seedgpt — build, test, bench.
#   make            the CPU trainer ./train
#   make test       every test; ends with "N passed, N failed"
#   make bench      speed and memory (not a test)
#   make verify     the recompute-and-dropout teaching table
#   make demo       the README's first run: setup, the King James Bible, a small model with dropout
#                   and recompute, eval, a sample and the loss plot (DEMO_STEPS, default 1500)
#   make plot RUN=DIR   DIR/log.jsonl -> DIR/loss.png (gnuplot)
#   make kjv        a small model on the King James Bible (plain: no recompute, no plot)
#   make fuzz       the loaders' fuzzers (FUZZ_SECONDS each); make test-asan: the suite under ASan
# (The CUDA backend is not built yet; nvcc only compiles attention/philox.h as device code in a
# test.)

CC      ?= gcc
NVCC    ?= nvcc
CUDA_HOME ?= /usr/local/cuda
# Bitwise reproducibility (DESIGN §4): no -ffast-math; ISO C mode keeps FMA contraction off.
CFLAGS  ?= -O2 -march=native
# -fno-math-errno lets sqrtf vectorise; it changes no result bit.
CFLAGS  += -std=c11 -fopenmp -fno-math-errno -Wall -Wextra -Wno-unused-parameter -D_GNU_SOURCE -g -I.
# OpenBLAS's OpenMP build shares the OpenMP threads; the default pthread build keeps a second pool
# that spins against them (measured: the small model's step 1.7x slower on 2 cores).
OPENBLAS_OMP := /usr/lib/x86_64-linux-gnu/openblas-openmp
ifneq ($(wildcard $(OPENBLAS_OMP)/libopenblas.so.0),)
LDLIBS  += -L$(OPENBLAS_OMP) -Wl,-rpath,$(OPENBLAS_OMP) -l:libopenblas.so.0 -lm
else
LDLIBS  += -lopenblas -lm
endif
# zlib: the CRC32 of training states (model/state.c)
LDLIBS  += -lz
# GPT-2 BPE (data/bpe.c): encoder.json through cJSON, the pre-tokenising regex through PCRE2
LDLIBS  += -lcjson -lpcre2-8

BUILD   := build

CORE_SRC := model/gpt.c model/ops_cpu.c model/mem.c model/modelfile.c model/state.c model/sample.c \
            checkpoint/checkpoint.c \
            attention/flash_cpu.c \
            data/tokenizer.c data/bpe.c data/shards.c data/prepare.c
CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/%.o)
# Test builds: the same sources with SEEDGPT_TEST_BUILD (NaN-filled scratch, allocation counting).
TEST_OBJ := $(CORE_SRC:%.c=$(BUILD)/test/%.o)

HEADERS := $(wildcard model/*.h attention/*.h data/*.h checkpoint/*.h tests/*.h)

.PHONY: all test test-run test-asan fuzz kjv demo plot setup verify bench clean
# test-asan builds its trainer elsewhere (TRAIN_BIN)
TRAIN_BIN ?= train
all: $(TRAIN_BIN)

$(TRAIN_BIN): $(BUILD)/train.o $(CORE_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/test/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DSEEDGPT_TEST_BUILD -c -o $@ $<

# ---- tests ---------------------------------------------------------------------------------
# Each C test is tests/NAME.c linked against the test build of the core.
C_TESTS := test_philox test_ops test_attention test_data test_modelfile test_model test_checkpoint \
           test_state test_corrupt test_bpe test_sample test_accum test_schedule
C_TEST_BINS := $(C_TESTS:%=$(BUILD)/tests/%)

# cuRAND's host generator is the external oracle for Philox (it runs without a GPU).
HAVE_CUDA := $(shell test -f $(CUDA_HOME)/include/curand.h && echo 1)
ifeq ($(HAVE_CUDA),1)
CURAND_TEST := $(BUILD)/tests/test_curand
$(BUILD)/tests/test_curand: tests/test_curand.c attention/philox.h tests/test.h
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

$(BUILD)/bench_attention: tests/bench_attention.c $(BUILD)/attention/flash_cpu.o $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/attention/flash_cpu.o $(LDLIBS)

$(BUILD)/bench_model: tests/bench_model.c $(CORE_OBJ) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(CORE_OBJ) $(LDLIBS)

bench:
	@scripts/bench.sh

$(BUILD)/tests/bigram_baseline: tests/bigram_baseline.c $(TEST_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(TEST_OBJ) $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(TEST_OBJ) $(HEADERS) $(wildcard tests/*.c)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DSEEDGPT_TEST_BUILD -o $@ $< $(filter tests/ref_%.c,$(wildcard tests/*.c)) $(TEST_OBJ) $(LDLIBS)

# The PyTorch oracle: the whole model against an independent implementation (SKIP without torch).
ORACLE := $(BUILD)/tests/oracle_harness
TORCH_PYTHON ?= $(shell for p in /usr/bin/python3 python3; do $$p -c 'import torch' >/dev/null 2>&1 && { echo $$p; exit; }; done; echo /usr/bin/python3)

# `make test` first installs what is missing (scripts/setup.sh), then builds and runs everything.
test:
	@scripts/setup.sh
	@$(MAKE) --no-print-directory test-run

test-run: $(TRAIN_BIN) $(C_TEST_BINS) $(ATTN_TILE_TESTS) $(CURAND_TEST) $(ORACLE) $(BUILD)/tests/bigram_baseline
	@tests/run.sh $(C_TEST_BINS) $(ATTN_TILE_TESTS) $(CURAND_RUN) "$(TORCH_PYTHON) tests/torch_oracle.py $(ORACLE)" \
		"$(TORCH_PYTHON) tests/torch_dropout_oracle.py $(ORACLE)" tests/check_nvcc.sh \
		"tests/test_bpe.sh $(BUILD)/tests/test_bpe" "$(TORCH_PYTHON) tests/test_convert.py $(ORACLE)" \
		tests/test_resume.sh tests/test_train_cli.sh "$(FUZZ_CI)" $(if $(ASAN_CI),"$(ASAN_CI)") "$(LEARN_TEST)"

# Resume, crash and corrupted-input tests call ./train; test-asan points them at its own build.
# `make fuzz`: each libFuzzer target (tests/fuzz/) for FUZZ_SECONDS; make test runs 10 s each,
# and the whole suite once more under ASan + UBSan (test-asan, ~1.5 min on 2 cores).
FUZZ_SECONDS ?= 60
FUZZ_CI ?= FUZZ_SEED=1 tests/fuzz/run.sh 10
ASAN_CI ?= $(MAKE) -s --no-print-directory test-asan
LEARN_TEST ?= tests/test_learn.sh
fuzz: $(TRAIN_BIN)
	@tests/fuzz/run.sh $(FUZZ_SECONDS)

# `make test-asan`: the suite under ASan + UBSan (any UBSan report aborts), in build/asan. The
# learning test is skipped there (too slow under ASan; make test runs it), and so are the fuzzers
# (already sanitized).
ASAN_BUILD := build/asan
ASAN_CFLAGS := $(filter-out -O2,$(CFLAGS)) -O1 -fno-omit-frame-pointer \
               -fsanitize=address,undefined -fno-sanitize-recover=undefined
test-asan:
	@SEEDGPT_TRAIN=$(ASAN_BUILD)/train $(MAKE) --no-print-directory test-run BUILD=$(ASAN_BUILD) \
		TRAIN_BIN=$(ASAN_BUILD)/train CFLAGS="$(ASAN_CFLAGS)" ASAN_CI= \
		FUZZ_CI="echo SKIP fuzz: make test runs the fuzzers, which are sanitized themselves" \
		LEARN_TEST="echo SKIP learns_kjv_below_bigram_baseline: too slow under ASan, make test runs it"

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

clean:
	rm -rf $(BUILD) train
