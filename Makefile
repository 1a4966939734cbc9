# kgen: `make` builds build/kgen and build/libkgen.a; `make test` builds and runs every test (plus an
# ASan+UBSan build); `make tune` tunes the default workload (arrives with the tuning issue).
CUDA_HOME ?= /usr/local/cuda
CC ?= cc
BUILD ?= build
CFLAGS_BASE = -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -Iinclude -I. -g
OPT ?= -O2
KGEN_RANDOM_SCHEDULES ?= 50
KGEN_GPU_RANDOM_SCHEDULES ?= 30
CFLAGS = $(CFLAGS_BASE) $(OPT) -fopenmp -MMD -MP
LDLIBS = -lm -ldl -lpthread -fopenmp

MODULES = base te schedule codegen runtime
LIB_SRC = $(foreach m,$(MODULES),$(wildcard $(m)/*.c))
LIB_OBJ = $(LIB_SRC:%.c=$(BUILD)/%.o)
# The CUDA emulation header, embedded in libkgen as the string kg_cuda_emu_header (runtime/emu.h).
EMU_HEADER_C = $(BUILD)/gen/cuda_emu_header.c
LIB_OBJ += $(EMU_HEADER_C:.c=.o)
CLI_SRC = $(wildcard cli/*.c)
CLI_OBJ = $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_SRC = $(wildcard tests/test_*.c)
TEST_BIN = $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)

# Debian packages kgen needs; the deps stamp installs only what is missing.
DEB_PKGS = libxgboost-dev libmsgpack-dev
DEPS_STAMP = $(BUILD)/.deps-ok

.PHONY: all deps test test-unit test-san test-fuzz tune clean lib
all: $(DEPS_STAMP) $(BUILD)/kgen $(BUILD)/libkgen.a

$(DEPS_STAMP):
	@mkdir -p $(BUILD)
	@missing=""; for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing missing Debian packages:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
	@touch $@
deps: $(DEPS_STAMP)

$(BUILD)/%.o: %.c
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
test-unit: all $(TEST_BIN) $(FUZZ_BIN)
	@KGEN=$(BUILD)/kgen BUILD=$(BUILD) KGEN_RANDOM_SCHEDULES=$(KGEN_RANDOM_SCHEDULES) \
	  KGEN_GPU_RANDOM_SCHEDULES=$(KGEN_GPU_RANDOM_SCHEDULES) tests/run.sh $(TEST_BIN)

# The same tests built with AddressSanitizer + UndefinedBehaviorSanitizer (LeakSanitizer included).
test-san:
	$(MAKE) --no-print-directory BUILD=build/san OPT="-O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
	  KGEN_RANDOM_SCHEDULES=8 KGEN_GPU_RANDOM_SCHEDULES=4 test-unit

test: test-unit test-san

# Tuning arrives with the tuning issue; until then `make tune` builds and says so.
tune: all
	@echo "kgen: tuning arrives with the tuning issue (#4); built $(BUILD)/kgen. Try: $(BUILD)/kgen run matmul -D M=256 -D N=256 -D K=256"

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d)

# Peer measurements for the GPU comparison (cuBLAS SGEMM, device-to-device copy); builds without CUDA headers
# and, with no device, prints "skipped: <reason>".
.PHONY: bench-tools
bench-tools: $(BUILD)/bench/gpu_peers
all: bench-tools
$(BUILD)/bench/%: bench/%.c $(BUILD)/libkgen.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libkgen.a $(LDLIBS)
