# kgen: `make` builds build/kgen and build/libkgen.a; `make test` builds and runs every test (plus an
# ASan+UBSan build); `make tune` tunes the default workload (matmul 1024^3) on the best target present.
CUDA_HOME ?= /usr/local/cuda
CC ?= cc
BUILD ?= build
CFLAGS_BASE = -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -Iinclude -I. -g
OPT ?= -O2
KGEN_RANDOM_SCHEDULES ?= 50
KGEN_GPU_RANDOM_SCHEDULES ?= 30
CFLAGS = $(CFLAGS_BASE) $(OPT) -fopenmp -MMD -MP
LDLIBS = -lxgboost -lmsgpackc -lm -ldl -lpthread -fopenmp

MODULES = base te schedule lower codegen tlog runtime costmodel gen search replay
LIB_SRC = $(foreach m,$(MODULES),$(wildcard $(m)/*.c))
LIB_OBJ = $(LIB_SRC:%.c=$(BUILD)/%.o)
# The CUDA emulation header, embedded in libkgen as the string kg_cuda_emu_header (runtime/emu.h).
EMU_HEADER_C = $(BUILD)/gen/cuda_emu_header.c
LIB_OBJ += $(EMU_HEADER_C:.c=.o)
# The macro names of the headers generated code includes, which lowering must not use as names.
RESERVED_C = $(BUILD)/gen/reserved_macros.c
LIB_OBJ += $(RESERVED_C:.c=.o)
CLI_SRC = $(wildcard cli/*.c)
CLI_OBJ = $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_SRC = $(wildcard tests/test_*.c)
TEST_BIN = $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)

# Debian packages kgen needs to build and run (g++: the CUDA emulator compiles generated CUDA as C++). Installed
# when missing; without them the build stops.
DEB_PKGS = libxgboost-dev libmsgpack-dev g++
# Debian packages the tests use (`make test` only, so `make` stays lean): Debian's python3 (/usr/bin/python3, which
# the tests run: a pyenv python3 earlier on PATH does not see Debian's modules) with numpy, msgpack and matplotlib
# for the bench scripts' tests, valgrind, clang with its OpenMP for the strict header compiles. Installed when
# missing; where they cannot be (no apt, no root and no sudo, no network) `make test` goes on and each test that
# needs one skips with a line naming the package. PyTorch (python3-torch, about 600 MB) is not installed: the
# PyTorch peers' test skips without it (`make test-deps TEST_DEB_PKGS+=python3-torch` adds it).
TEST_DEB_PKGS = python3 python3-numpy python3-msgpack python3-matplotlib valgrind clang libomp-dev
DEPS_STAMP = $(BUILD)/.deps-ok
TEST_DEPS_STAMP = $(BUILD)/.test-deps-ok

.PHONY: all deps test-deps test test-unit test-san tune clean
all: $(DEPS_STAMP) $(BUILD)/kgen $(BUILD)/libkgen.a

# Installs the Debian packages $(1) that dpkg does not list as installed, as root or through sudo. Each stamp
# holds its list and depends on the Makefile, so a changed list is checked again (the check itself is a dpkg
# query per package). $(2): what to do when they cannot be installed.
define deb_install
	@mkdir -p $(BUILD)
	@if ! command -v dpkg >/dev/null; then echo "no dpkg (not Debian): install by hand what provides $(1)"; \
	  echo "$(1)" > $@; exit 0; fi; \
	missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing missing Debian packages:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null; then SUDO="sudo -n"; else SUDO=none; fi; \
	  if [ "$$SUDO" = none ] || ! command -v apt-get >/dev/null; then \
	    echo "cannot install them here (no apt-get, or not root and no sudo)"; $(2); \
	  else \
	    { $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; } \
	      > $@.log 2>&1 || { tail -20 $@.log; echo "installing$$missing failed (log: $@.log)"; $(2); }; \
	  fi; \
	fi; \
	echo "$(1)" > $@
endef
$(DEPS_STAMP): Makefile
	$(call deb_install,$(DEB_PKGS),exit 1)
deps: $(DEPS_STAMP)
# A failed install leaves no stamp (the next `make test` tries again) and fails nothing: the tests skip.
$(TEST_DEPS_STAMP): Makefile
	$(call deb_install,$(TEST_DEB_PKGS),echo "the tests that need them skip"; exit 0)
test-deps: $(TEST_DEPS_STAMP)

# Order-only on the deps stamp: under make -j the packages are installed before anything compiles against them.
$(BUILD)/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# Each line of the header becomes a C string literal: backslashes, quotes and '?' (trigraphs) escaped. Not xxd,
# which is not everywhere.
$(EMU_HEADER_C): runtime/cuda_emu.h
	@mkdir -p $(dir $@)
	{ echo '/* Generated from runtime/cuda_emu.h by the Makefile. */'; echo 'const char kg_cuda_emu_header[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/?/\\?/g' -e 's/^/  "/' -e 's/$$/\\n"/' $<; echo ';'; } > $@.tmp
	mv $@.tmp $@
$(EMU_HEADER_C:.c=.o): $(EMU_HEADER_C)
	$(CC) $(CFLAGS) -c $< -o $@

# The C printer's prelude includes math.h, stdint.h, stdlib.h and string.h (with OpenMP); the emulator force-includes
# runtime/cuda_emu.h. "NULL" keeps the list non-empty where no compiler answers.
$(RESERVED_C): runtime/cuda_emu.h | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	{ printf '#include <math.h>\n#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n' | $(CC) -fopenmp -dM -E -x c - ; \
	  $(CXX) -std=c++17 -DKG_EMULATE -dM -E -x c++ runtime/cuda_emu.h; echo '#define NULL'; } 2>/dev/null | \
	  sed -n 's/^#define \([A-Za-z][A-Za-z0-9_]*\).*/\1/p' | LC_ALL=C sort -u | \
	  awk 'BEGIN { print "/* Generated by the Makefile: macro names of the headers generated code includes. */"; \
	               print "const char *const kg_reserved_macros[] = {" } { printf "  \"%s\",\n", $$0 } \
	       END { print "};"; print "const int kg_nreserved_macros = (int)(sizeof kg_reserved_macros / sizeof *kg_reserved_macros);" }' > $@.tmp
	mv $@.tmp $@
$(RESERVED_C:.c=.o): $(RESERVED_C)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libkgen.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/kgen: $(CLI_OBJ) $(BUILD)/libkgen.a
	$(CC) $(CFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libkgen.a $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(BUILD)/libkgen.a tests/testutil.h tests/testlib.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libkgen.a $(LDLIBS)

# Fuzz targets (tests/fuzz_NAME.c, libFuzzer entry points) linked with a main that replays a corpus
# (tests/fuzz/NAME-corpus) in `make test`; tests/fuzz/run-libfuzzer.sh NAME fuzzes one for real.
FUZZ_SRC = $(wildcard tests/fuzz_*.c)
FUZZ_NAMES = $(filter-out replay_main,$(FUZZ_SRC:tests/fuzz_%.c=%))
FUZZ_BIN = $(FUZZ_NAMES:%=$(BUILD)/tests/fuzz_replay_%)
$(BUILD)/tests/fuzz_replay_%: tests/fuzz_%.c tests/fuzz_replay_main.c $(BUILD)/libkgen.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< tests/fuzz_replay_main.c $(BUILD)/libkgen.a $(LDLIBS)

# Every unit test, the CLI tests, and the fuzz corpora replayed.
test-unit: all $(TEST_DEPS_STAMP) $(TEST_BIN) $(FUZZ_BIN)
	@KGEN=$(BUILD)/kgen BUILD=$(BUILD) KGEN_RANDOM_SCHEDULES=$(KGEN_RANDOM_SCHEDULES) \
	  KGEN_GPU_RANDOM_SCHEDULES=$(KGEN_GPU_RANDOM_SCHEDULES) tests/run.sh $(TEST_BIN)

# The same tests built with AddressSanitizer + UndefinedBehaviorSanitizer (LeakSanitizer included).
test-san:
	$(MAKE) --no-print-directory BUILD=build/san OPT="-O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
	  KGEN_RANDOM_SCHEDULES=8 KGEN_GPU_RANDOM_SCHEDULES=4 test-unit

test: test-unit test-san

# A short tuning of the default workload on the best target present (a GPU when one answers, else the CPU); the
# log (resumable: a second `make tune` continues it) and the best trace go to $(BUILD)/tune/.
TUNE_TRIALS ?= 128
tune: all
	@mkdir -p $(BUILD)/tune
	$(BUILD)/kgen tune matmul -D M=1024 -D N=1024 -D K=1024 --trials $(TUNE_TRIALS) \
	  --log $(BUILD)/tune/matmul-1024.kglog --best-out $(BUILD)/tune/matmul-1024.best.sched

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d)

# Build-time replay: the committed tuning logs exported as headers, no search and no measurement. Every log
# tuning_logs/NAME.c.kglog gives $(BUILD)/kernels/c/NAME.h (the C target, always); every NAME.cuda.kglog gives
# $(BUILD)/kernels/cuda/NAME.h with a cubin per arch of KGEN_ARCH (comma-separated) plus PTX. A header depends on
# its own log (and on kgen), so a changed log regenerates its header and nothing else. A log's programs are found
# in te/lib and bench/workloads.
KGEN_ARCH ?= sm_86
KERNEL_LIBS = --lib te/lib --lib bench/workloads
C_LOGS = $(wildcard tuning_logs/*.c.kglog)
CUDA_LOGS = $(wildcard tuning_logs/*.cuda.kglog)
C_HEADERS = $(C_LOGS:tuning_logs/%.c.kglog=$(BUILD)/kernels/c/%.h)
CUDA_HEADERS = $(CUDA_LOGS:tuning_logs/%.cuda.kglog=$(BUILD)/kernels/cuda/%.h)
.PHONY: kernels
kernels: $(C_HEADERS) $(CUDA_HEADERS)
all: kernels
$(BUILD)/kernels/c/%.h: tuning_logs/%.c.kglog $(BUILD)/kgen
	@mkdir -p $(dir $@)
	$(BUILD)/kgen export $< --target c --workload $* --out $(dir $@) $(KERNEL_LIBS) >/dev/null
# The arch list is a dependency too: changing KGEN_ARCH re-exports the CUDA headers.
$(BUILD)/kernels/cuda/.arch: FORCE
	@mkdir -p $(dir $@)
	@[ "$$(cat $@ 2>/dev/null)" = "$(KGEN_ARCH)" ] || echo "$(KGEN_ARCH)" > $@
$(BUILD)/kernels/cuda/%.h: tuning_logs/%.cuda.kglog $(BUILD)/kgen $(BUILD)/kernels/cuda/.arch
	$(BUILD)/kgen export $< --target cuda --arch $(KGEN_ARCH) --workload $* --out $(dir $@) $(KERNEL_LIBS) >/dev/null
.PHONY: FORCE
FORCE:

# examples/kernels/check_c.c: a plain C program including exported headers, checked against plain loops (run by
# tests/cli/test_examples.sh). Built with the system compiler as a user would, not with kgen's flags.
EXAMPLE_C_FLAGS = -std=c11 -Wall -Wextra -Werror -O3 -march=native -fno-math-errno -fopenmp
$(BUILD)/examples/check_c: examples/kernels/check_c.c $(C_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(EXAMPLE_C_FLAGS) -I$(BUILD)/kernels/c -o $@ $< -lm
test-unit: $(BUILD)/examples/check_c

# Peer measurements for the GPU comparison (cuBLAS SGEMM, device-to-device copy); builds without CUDA headers
# and, with no device, prints "skipped: <reason>".
.PHONY: bench-tools
bench-tools: $(BUILD)/bench/gpu_peers $(BUILD)/bench/sketch_sample $(BUILD)/bench/dynamic_shapes
all: bench-tools
$(BUILD)/bench/%: bench/%.c $(BUILD)/libkgen.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libkgen.a $(LDLIBS)

# The benchmark suite on this machine's CPU (bench/suite.sh: the peers, fusion, amortization, tuning curves and
# shape transitions; about an hour on 2 cores at TRIALS=64). bench/device-check.sh runs it on a GPU.
.PHONY: bench bench-tune
bench:
	BUILD=$(BUILD) bench/suite.sh
# The longer CPU tuning benchmark (bench/tune-cpu.sh: hours at 500 trials; TRIALS=40 for a quick run).
bench-tune:
	BUILD=$(BUILD) bench/tune-cpu.sh
