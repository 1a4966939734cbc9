# kgen: `make` builds build/kgen and build/libkgen.a (it checks the Debian packages it needs and, when one is
# missing, says so and stops: `make deps` installs them); `make test` builds and runs every test (plus an ASan+UBSan
# build), `make check` a fast subset; `make tune` tunes the default workload (matmul 1024^3) on the best target
# present; `make install` installs kgen, libkgen, its headers, workloads, pkg-config and CMake files (docs/install.md).
CUDA_HOME ?= /usr/local/cuda
CC ?= cc
BUILD ?= build
OPT ?= -O2
KGEN_RANDOM_SCHEDULES ?= 50
KGEN_GPU_RANDOM_SCHEDULES ?= 30
# The flags kgen's own sources need (language, warnings as errors, feature macros, include paths, OpenMP, header
# dependency files) are kept apart from CFLAGS, which is the user's: `make CFLAGS=-O0` changes the optimization and
# cannot drop -Werror or -std=c11. OPT is the optimization the test targets set (test-san: the sanitizers).
KG_CFLAGS = -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -Iinclude -I. $(DEP_CFLAGS) $(OPT) -fopenmp -MMD -MP
CFLAGS ?= -g
ALL_CFLAGS = $(KG_CFLAGS) $(CFLAGS)
# msgpack and XGBoost through pkg-config where their packages ship .pc files (Debian's do), else by library name.
DEP_CFLAGS := $(shell pkg-config --cflags msgpack xgboost 2>/dev/null)
DEP_LIBS := $(or $(shell pkg-config --libs msgpack xgboost 2>/dev/null),-lmsgpackc -lxgboost)
SYS_LIBS = -lm -ldl -lpthread -fopenmp
KG_LDLIBS = $(DEP_LIBS) $(SYS_LIBS)
LINK = $(CC) $(ALL_CFLAGS) $(LDFLAGS)
# The flags generated kernels are compiled with, read from the one place that defines them (codegen/kernel_flags.h,
# also used by kgen itself); tests/cli/test_make.sh checks that this read finds them.
KERNEL_CFLAGS := $(shell sed -n 's/^\#define KG_KERNEL_CFLAGS "\(.*\)"$$/\1/p' codegen/kernel_flags.h)
KGEN_VERSION := $(shell sed -n 's/^\#define KGEN_VERSION "\(.*\)"$$/\1/p' base/version.h)
ifeq ($(KGEN_VERSION),)
$(error base/version.h defines no KGEN_VERSION "X.Y.Z": kgen.pc and the CMake package need it)
endif

MODULES = base te schedule lower codegen tlog runtime costmodel gen search replay
LIB_SRC = $(foreach m,$(MODULES),$(wildcard $(m)/*.c))
LIB_OBJ = $(LIB_SRC:%.c=$(BUILD)/%.o)
# The CUDA emulation header, embedded in libkgen as the string kg_cuda_emu_header (runtime/emu.h).
EMU_HEADER_C = $(BUILD)/generated/cuda_emu_header.c
LIB_OBJ += $(EMU_HEADER_C:.c=.o)
# The macro names of the headers generated code includes, which lowering must not use as names.
RESERVED_C = $(BUILD)/generated/reserved_macros.c
LIB_OBJ += $(RESERVED_C:.c=.o)
CLI_SRC = $(wildcard cli/*.c)
CLI_OBJ = $(CLI_SRC:%.c=$(BUILD)/%.o)
# Distributed tuning (dist/, `mpirun kgen tune`): in the kgen binary only, so that libkgen needs no MPI. Built with
# MPI where it is found (MPI_FLAGS, below), without it elsewhere.
DIST_SRC = $(wildcard dist/*.c)
DIST_OBJ = $(DIST_SRC:%.c=$(BUILD)/%.o)
TEST_SRC = $(wildcard tests/test_*.c)
TEST_BIN = $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)

# Debian packages kgen needs to build and run (g++: the CUDA emulator compiles generated CUDA as C++). A bare `make`
# only checks them (it never runs the package manager: building should not change the machine behind one's back)
# and stops naming the missing ones; `make deps` installs them, and so do `make test`, `make check` and `make tune`,
# the README's commands for a fresh machine.
DEB_PKGS = libxgboost-dev libmsgpack-dev g++
# Debian packages the tests use (`make test` and `make check` only, so `make` stays lean): Debian's python3 (/usr/bin/python3, which
# the tests run: a pyenv python3 earlier on PATH does not see Debian's modules) with numpy, msgpack and matplotlib
# for the bench scripts' tests, valgrind, clang with its OpenMP for the strict header compiles, cmake for the
# installed-package examples. Installed when missing; where they cannot be (no apt, no root and no sudo, no
# network) `make test` goes on and each test that needs one skips with a line naming the package. PyTorch (2 GB)
# is not installed by the tests: `make bench` installs it into its own virtual environment (bench/torch-venv.sh,
# $(BUILD)/venv-torch), and the PyTorch peers' test runs where that exists and skips otherwise.
TEST_DEB_PKGS = python3 python3-numpy python3-msgpack python3-matplotlib valgrind clang libomp-dev cmake pkg-config
# MPI for distributed tuning: optional. The targets that install packages (deps, test, check, tune) install it when
# missing; a plain `make` neither needs nor installs it, and builds kgen without MPI where it is absent.
MPI_DEB_PKGS = libopenmpi-dev openmpi-bin
MPI_STAMP = $(BUILD)/.mpi-deps-ok
DEPS_STAMP = $(BUILD)/.deps-ok
TEST_DEPS_STAMP = $(BUILD)/.test-deps-ok

.PHONY: all deps test-deps test test-unit test-san check tune clean install uninstall
all: $(DEPS_STAMP) $(BUILD)/kgen $(BUILD)/libkgen.a

# Whether Debian package $(1) is installed: dpkg knows a removed package whose configuration files are left too, so
# its status is what says.
deb_has = dpkg -s $(1) 2>/dev/null | grep -q '^Status: install ok installed'
# Installs the Debian packages $(1) that dpkg does not list as installed, as root or through sudo. Each stamp
# holds its list and depends on the Makefile, so a changed list is checked again (the check itself is a dpkg
# query per package). $(2): what to do when they cannot be installed.
define deb_install
	@mkdir -p $(BUILD)
	@if ! command -v dpkg >/dev/null; then echo "no dpkg (not Debian): install by hand what provides $(1)"; \
	  echo "$(1)" > $@; exit 0; fi; \
	missing=""; for p in $(1); do $(call deb_has,$$p) || missing="$$missing $$p"; done; \
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
# Checks, without installing anything, that the build's packages are there: dpkg's word on Debian, elsewhere a
# compile and link against msgpack and XGBoost plus a look for g++. Stops with what is missing and how to get it.
define deps_check
	@mkdir -p $(BUILD)
	@if command -v dpkg >/dev/null; then \
	  missing=""; for p in $(DEB_PKGS); do $(call deb_has,$$p) || missing="$$missing $$p"; done; \
	  if [ -n "$$missing" ]; then \
	    echo "kgen needs the Debian packages$$missing, which are not installed."; \
	    echo "'make deps' installs them (apt-get, as root or through sudo); or: apt-get install$$missing"; exit 1; \
	  fi; \
	else \
	  printf '#include <msgpack.h>\n#include <xgboost/c_api.h>\nint main(void) { return 0; }\n' > $(BUILD)/.deps-probe.c; \
	  $(CC) $(DEP_CFLAGS) $(BUILD)/.deps-probe.c -o $(BUILD)/.deps-probe $(DEP_LIBS) > $(BUILD)/.deps-probe.log 2>&1 || { \
	    cat $(BUILD)/.deps-probe.log; echo "kgen needs msgpack-c and XGBoost (headers and libraries): install them"; exit 1; }; \
	  command -v $${CXX:-g++} > /dev/null || { echo "kgen needs a C++ compiler (g++, or CXX) for its CUDA emulator"; exit 1; }; \
	fi; \
	echo "$(DEB_PKGS)" > $@
endef
# DEPS_INSTALL (set for the targets that install: deps, test-deps, test, check, tune) is inherited by the stamp
# when it is built as their prerequisite.
$(DEPS_STAMP): Makefile
	$(if $(DEPS_INSTALL),$(call deb_install,$(DEB_PKGS),exit 1),$(call deps_check))
deps test-deps test test-unit check tune: DEPS_INSTALL = yes
# `make deps` looks again even where a stamp is left (a package may have been removed since).
deps:
	@rm -f $(DEPS_STAMP)
	@$(MAKE) --no-print-directory DEPS_INSTALL=yes $(DEPS_STAMP)
	@echo "kgen's packages are installed: $(DEB_PKGS)"
# A failed install leaves no stamp (the next `make test` tries again) and fails nothing: the tests skip. After the
# build's packages: two apt-get runs at once under make -j would fight over dpkg's lock.
$(TEST_DEPS_STAMP): Makefile | $(DEPS_STAMP) $(MPI_STAMP)
	$(call deb_install,$(TEST_DEB_PKGS),echo "the tests that need them skip"; exit 0)
test-deps: $(TEST_DEPS_STAMP)

# Without DEPS_INSTALL nothing is installed and no stamp is left, so that a later `make test` installs it. A failed
# install leaves no stamp either (tried again next time) and fails nothing: kgen is built without MPI.
$(MPI_STAMP): Makefile | $(DEPS_STAMP)
	$(if $(DEPS_INSTALL),$(call deb_install,$(MPI_DEB_PKGS),echo "kgen is built without MPI (no distributed tuning)"; exit 0),@true)
# The compile and link flags of MPI, found when building (not when this Makefile is read: the stamp above may have
# just installed it): pkg-config's ompi-c or mpich, else mpicc's own. "CFLAGS|LIBS", "|" without MPI; the file is
# rewritten only when that changes, so that dist/ and kgen are rebuilt only then.
MPI_FLAGS = $(BUILD)/mpi.flags
$(MPI_FLAGS): FORCE | $(MPI_STAMP)
	@mkdir -p $(BUILD); new="|"; \
	for pc in ompi-c mpich; do \
	  if pkg-config --exists $$pc 2>/dev/null; then new="-DKG_HAVE_MPI $$(pkg-config --cflags $$pc)|$$(pkg-config --libs $$pc)"; break; fi; \
	done; \
	if [ "$$new" = "|" ] && command -v mpicc >/dev/null && c=$$(mpicc --showme:compile 2>/dev/null) && \
	   l=$$(mpicc --showme:link 2>/dev/null); then new="-DKG_HAVE_MPI $$c|$$l"; fi; \
	[ "$$(cat $@ 2>/dev/null)" = "$$new" ] || echo "$$new" > $@
.PHONY: FORCE
FORCE:
$(BUILD)/dist/%.o: dist/%.c $(MPI_FLAGS) | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $$(cut -d'|' -f1 $(MPI_FLAGS)) -c $< -o $@

# Order-only on the deps stamp: under make -j the packages are installed before anything compiles against them.
$(BUILD)/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

# Each line of the header becomes a C string literal: backslashes, quotes and '?' (trigraphs) escaped. Not xxd,
# which is not everywhere.
$(EMU_HEADER_C): runtime/cuda_emu.h
	@mkdir -p $(dir $@)
	{ echo '/* Generated from runtime/cuda_emu.h by the Makefile. */'; echo 'const char kg_cuda_emu_header[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/?/\\?/g' -e 's/^/  "/' -e 's/$$/\\n"/' $<; echo ';'; } > $@.tmp
	mv $@.tmp $@
$(EMU_HEADER_C:.c=.o): $(EMU_HEADER_C)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

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
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/libkgen.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/kgen: $(CLI_OBJ) $(DIST_OBJ) $(BUILD)/libkgen.a $(MPI_FLAGS)
	$(LINK) -o $@ $(CLI_OBJ) $(DIST_OBJ) $(BUILD)/libkgen.a $(KG_LDLIBS) $(LDLIBS) $$(cut -d'|' -f2 $(MPI_FLAGS))

# Tests, fuzz replayers and bench tools are compiled and linked in one step; -MMD leaves BIN.d beside each, which
# is included below, so that a changed header rebuilds them too.
$(BUILD)/tests/%: tests/%.c $(BUILD)/libkgen.a | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(LINK) -o $@ $< $(BUILD)/libkgen.a $(KG_LDLIBS) $(LDLIBS)

# Fuzz targets (tests/fuzz_NAME.c, libFuzzer entry points) linked with a main that replays a corpus
# (tests/fuzz/NAME-corpus) in `make test`; tests/fuzz/run-libfuzzer.sh NAME fuzzes one for real.
FUZZ_SRC = $(wildcard tests/fuzz_*.c)
FUZZ_NAMES = $(filter-out replay_main,$(FUZZ_SRC:tests/fuzz_%.c=%))
FUZZ_BIN = $(FUZZ_NAMES:%=$(BUILD)/tests/fuzz_replay_%)
# The replay main is an object of its own: gcc writes one BIN.d per link, which would hold only the last source's
# headers. Kept (not an intermediate file to delete), so its own .d stays true.
.SECONDARY: $(BUILD)/tests/fuzz_replay_main.o
$(BUILD)/tests/fuzz_replay_%: tests/fuzz_%.c $(BUILD)/tests/fuzz_replay_main.o $(BUILD)/libkgen.a
	@mkdir -p $(dir $@)
	$(LINK) -o $@ $< $(BUILD)/tests/fuzz_replay_main.o $(BUILD)/libkgen.a $(KG_LDLIBS) $(LDLIBS)

# Every unit test, the CLI tests, and the fuzz corpora replayed.
test-unit: all $(TEST_DEPS_STAMP) $(TEST_BIN) $(FUZZ_BIN)
	@KGEN=$(BUILD)/kgen BUILD=$(BUILD) KGEN_RANDOM_SCHEDULES=$(KGEN_RANDOM_SCHEDULES) \
	  KGEN_GPU_RANDOM_SCHEDULES=$(KGEN_GPU_RANDOM_SCHEDULES) tests/run.sh $(TEST_BIN)

# The same tests built with AddressSanitizer + UndefinedBehaviorSanitizer (LeakSanitizer included).
test-san:
	$(MAKE) --no-print-directory BUILD=build/san OPT="-O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
	  KGEN_RANDOM_SCHEDULES=8 KGEN_GPU_RANDOM_SCHEDULES=4 test-unit

test: test-unit test-san

# The fast tier, for a change's first check (about 5 minutes on 2 cores, where `make test` takes over half an
# hour; CI runs `make test`): the unit tests with few random schedules (the numbers test-san uses) except the three
# slowest (CHECK_SKIP_UNIT, each over a minute and a half even so: GPU sketches compiled with NVRTC for every
# workload, NaN propagation through every target, every exported header compiled by gcc, g++ and clang under every
# flag set), the fuzz corpora replayed, and the CLI tests of CHECK_CLI_TESTS: the CLI's basics and messages, the
# exported-header example, the Makefile's contract and the installed package. Not run: those three, the other CLI
# tests (tuning, export at every size, valgrind, strict header compiles, the bench scripts), the sanitizer build.
CHECK_SKIP_UNIT = test_sketch_gpu test_nan test_header_c
CHECK_BIN = $(filter-out $(CHECK_SKIP_UNIT:%=$(BUILD)/tests/%),$(TEST_BIN))
CHECK_CLI_TESTS = tests/cli/test_cli.sh tests/cli/test_cli_messages.sh tests/cli/test_examples.sh \
  tests/cli/test_make.sh tests/cli/test_install.sh
check: all $(TEST_DEPS_STAMP) $(CHECK_BIN) $(FUZZ_BIN) $(BUILD)/examples/check_c
	@KGEN=$(BUILD)/kgen BUILD=$(BUILD) KGEN_RANDOM_SCHEDULES=8 KGEN_GPU_RANDOM_SCHEDULES=4 \
	  CLI_TESTS="$(CHECK_CLI_TESTS)" tests/run.sh $(CHECK_BIN)

# A short tuning of the default workload on the best target present (a GPU when one answers, else the CPU); the
# log (resumable: a second `make tune` continues it) and the best trace go to $(BUILD)/tune/.
TUNE_TRIALS ?= 128
tune: all
	@mkdir -p $(BUILD)/tune
	$(BUILD)/kgen tune matmul -D M=1024 -D N=1024 -D K=1024 --trials $(TUNE_TRIALS) \
	  --log $(BUILD)/tune/matmul-1024.kglog --best-out $(BUILD)/tune/matmul-1024.best.sched

# The build folder in use (build/san is inside build). An empty or root-like BUILD is refused rather than removed.
clean:
	@case "$(BUILD)" in ""|.|./|/|..|../) echo "refusing to remove BUILD='$(BUILD)'"; exit 1;; esac
	rm -rf $(BUILD)

# Installation (docs/install.md): `make install [PREFIX=/usr/local] [DESTDIR=staging]`, undone by `make
# uninstall` with the same variables. The layout under PREFIX:
#   bin/kgen, lib/libkgen.a
#   include/kgen.h and include/kgen/MODULE/*.h: kgen.h includes its module headers by paths relative to the source
#     tree ("../te/te.h"); installed, kgen.h's own includes point into include/kgen/ and the module headers keep
#     their layout there, so their relative includes still resolve and `#include <kgen.h>` needs only -I$PREFIX/include
#   share/kgen/lib/*.te: the workload library (an installed kgen finds it beside its bin folder, cli/util.c)
#   share/kgen/cuda_emu.h: the CUDA emulator's header, for compiling exported CUDA headers with KG_EMULATE
#   share/kgen/kgen.mk: the Makefile fragment (kgen_kernels); lib/pkgconfig/kgen.pc;
#   lib/cmake/kgen/kgenConfig.cmake and kgenConfigVersion.cmake (find_package(kgen), kgen_add_kernels)
# The headers installed are those kgen.h includes, asked of the compiler, so a header moved or added in the source
# tree is installed without a list kept here.
PREFIX ?= /usr/local
DESTDIR ?=
INSTALL_ROOT = $(DESTDIR)$(PREFIX)
PUBLIC_HEADERS = $(shell $(CC) -std=c11 -MM -x c include/kgen.h 2>/dev/null | tr -d '\\' | tr ' ' '\n' | \
  grep '\.h$$' | grep -vx include/kgen.h | xargs -r realpath -m --relative-to=. | LC_ALL=C sort -u)
WORKLOADS = $(wildcard te/lib/*.te)
# msgpack and XGBoost as pkg-config requirements where their .pc files exist, else as plain libraries.
PC_REQUIRES = $(foreach d,msgpack xgboost,$(if $(shell pkg-config --exists $(d) 2>/dev/null && echo y),$(d)))
PC_FALLBACK = $(if $(filter msgpack,$(PC_REQUIRES)),,-lmsgpackc) $(if $(filter xgboost,$(PC_REQUIRES)),,-lxgboost)
VERSION_PARTS = $(subst ., ,$(KGEN_VERSION))
# The templates' @NAME@ fields. kgen.mk has no pkg-config of its own, so it gets the whole static link line.
PKG_SED = sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(KGEN_VERSION)|g' \
  -e 's|@VERSION_MAJOR@|$(word 1,$(VERSION_PARTS))|g' -e 's|@VERSION_MINOR@|$(word 2,$(VERSION_PARTS))|g' \
  -e 's|@KERNEL_CFLAGS@|$(KERNEL_CFLAGS)|g' -e 's|@REQUIRES_PRIVATE@|$(strip $(PC_REQUIRES))|g' \
  -e 's|@LIBS_PRIVATE@|$(strip $(PC_FALLBACK) $(SYS_LIBS))|g' -e 's|@LIBS_STATIC@|$(strip $(DEP_LIBS) $(SYS_LIBS))|g'
INSTALLED_FILES = bin/kgen lib/libkgen.a include/kgen.h $(PUBLIC_HEADERS:%=include/kgen/%) \
  $(WORKLOADS:te/lib/%=share/kgen/lib/%) share/kgen/cuda_emu.h share/kgen/kgen.mk lib/pkgconfig/kgen.pc \
  lib/cmake/kgen/kgenConfig.cmake lib/cmake/kgen/kgenConfigVersion.cmake
# The folders that are kgen's alone, removed by uninstall once empty (deepest first: sorted in reverse).
INSTALLED_DIRS = $(sort $(dir $(PUBLIC_HEADERS:%=include/kgen/%))) include/kgen share/kgen/lib share/kgen lib/cmake/kgen

install: all
	@[ -n "$(strip $(PUBLIC_HEADERS))" ] || { echo "cannot list the headers include/kgen.h includes"; exit 1; }
	install -d $(INSTALL_ROOT)/bin $(INSTALL_ROOT)/lib/pkgconfig $(INSTALL_ROOT)/lib/cmake/kgen \
	  $(INSTALL_ROOT)/share/kgen/lib $(addprefix $(INSTALL_ROOT)/,$(sort $(dir $(PUBLIC_HEADERS:%=include/kgen/%))))
	install -m 755 $(BUILD)/kgen $(INSTALL_ROOT)/bin/kgen
	install -m 644 $(BUILD)/libkgen.a $(INSTALL_ROOT)/lib/libkgen.a
	sed 's|^#include "\.\./|#include "kgen/|' include/kgen.h > $(INSTALL_ROOT)/include/kgen.h
	chmod 644 $(INSTALL_ROOT)/include/kgen.h
	@for h in $(PUBLIC_HEADERS); do install -m 644 $$h $(INSTALL_ROOT)/include/kgen/$$h || exit 1; done
	install -m 644 $(WORKLOADS) $(INSTALL_ROOT)/share/kgen/lib/
	install -m 644 runtime/cuda_emu.h $(INSTALL_ROOT)/share/kgen/cuda_emu.h
	$(PKG_SED) pkg/kgen.mk.in > $(INSTALL_ROOT)/share/kgen/kgen.mk
	$(PKG_SED) pkg/kgen.pc.in > $(INSTALL_ROOT)/lib/pkgconfig/kgen.pc
	$(PKG_SED) pkg/kgenConfig.cmake.in > $(INSTALL_ROOT)/lib/cmake/kgen/kgenConfig.cmake
	$(PKG_SED) pkg/kgenConfigVersion.cmake.in > $(INSTALL_ROOT)/lib/cmake/kgen/kgenConfigVersion.cmake
	chmod 644 $(addprefix $(INSTALL_ROOT)/,share/kgen/kgen.mk lib/pkgconfig/kgen.pc lib/cmake/kgen/kgenConfig.cmake \
	  lib/cmake/kgen/kgenConfigVersion.cmake)

# Exactly the files install writes, then kgen's own folders if they are left empty (bin, lib and the rest are
# shared with other packages and stay).
uninstall:
	rm -f $(addprefix $(INSTALL_ROOT)/,$(INSTALLED_FILES))
	@for d in $$(printf '%s\n' $(INSTALLED_DIRS) | LC_ALL=C sort -r); do [ ! -d $(INSTALL_ROOT)/$$d ] || rmdir $(INSTALL_ROOT)/$$d 2>/dev/null || true; done

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
# The flags are those kgen measured the kernels with (KERNEL_CFLAGS) with warnings as errors.
EXAMPLE_C_FLAGS = $(KERNEL_CFLAGS) -Wall -Wextra -Werror
$(BUILD)/examples/check_c: examples/kernels/check_c.c $(C_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(EXAMPLE_C_FLAGS) -MMD -MP -I$(BUILD)/kernels/c -o $@ $< -lm
test-unit: $(BUILD)/examples/check_c

# Peer measurements for the GPU comparison (cuBLAS SGEMM, device-to-device copy; builds without CUDA headers
# and, with no device, prints "skipped: <reason>") and the CPU's copy bandwidth (copy_bw, OpenMP), the reference
# rate of the memory-bound kernels in `make bench`; estimate_rank, how the analytical estimate ranks what a GPU
# measured (a tuning log); mpi_pingpong, what one candidate costs rank 0 of a distributed tuning (MPI's flags; without
# MPI it only says so).
# BENCH_BIN is defined before the rule that names it: make expands a rule's prerequisites when it reads the rule.
BENCH_BIN = $(BUILD)/bench/gpu_peers $(BUILD)/bench/sketch_sample $(BUILD)/bench/dynamic_shapes $(BUILD)/bench/copy_bw \
  $(BUILD)/bench/estimate_rank $(BUILD)/bench/gpu_wellformed $(BUILD)/bench/mpi_pingpong
.PHONY: bench-tools
bench-tools: $(BENCH_BIN)
all: bench-tools
$(BUILD)/bench/%: bench/%.c $(BUILD)/libkgen.a
	@mkdir -p $(dir $@)
	$(LINK) -o $@ $< $(BUILD)/libkgen.a $(KG_LDLIBS) $(LDLIBS)
$(BUILD)/bench/mpi_pingpong: bench/mpi_pingpong.c $(MPI_FLAGS) | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $$(cut -d'|' -f1 $(MPI_FLAGS)) -o $@ $< $$(cut -d'|' -f2 $(MPI_FLAGS))

# The benchmark suite on this machine's CPU (bench/suite.sh: the peers, fusion, amortization, tuning curves and
# shape transitions; about an hour on 2 cores at TRIALS=64). Its setup step installs the PyTorch peers' PyTorch 2.x
# from PyPI into $(BUILD)/venv-torch once (bench/torch-venv.sh, about 2 GB). bench/device-check.sh runs it on a GPU.
.PHONY: bench bench-tune
bench:
	BUILD=$(BUILD) bench/suite.sh
# The longer CPU tuning benchmark (bench/tune-cpu.sh: hours at 500 trials; TRIALS=40 for a quick run).
bench-tune:
	BUILD=$(BUILD) bench/tune-cpu.sh

# Every header dependency file: the library's and the CLI's objects, and the tests', fuzz replayers', bench tools'
# and the example's single-step builds.
-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_BIN:=.d) $(FUZZ_BIN:=.d) $(BUILD)/tests/fuzz_replay_main.d \
  $(BENCH_BIN:=.d) $(BUILD)/examples/check_c.d
