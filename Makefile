# fp4forge: one library (src/, public headers in include/fp4forge/), one thin
# CLI (cli/) over it, tests under tests/. README "Layout" says what each folder holds.
CC      ?= cc
# The build folder; a second checkout user (a helper) builds beside with B=build-x.
B       ?= build
# CI's whole command is a plain `make test` (.ci/run, README): without this its three
# builds (release, sanitizers, fuzz harnesses) ran on one core, 258 s of CPU that take
# 119 s at -j2 on the 2-core Zen 3 VM. An explicit -j (or -j1) still wins.
ifeq ($(filter -j%,$(MAKEFLAGS)),)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
endif
CSTD    := -std=c11 -D_GNU_SOURCE -ffp-contract=off
WARN    := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
OPT     ?= -O2 -g
DEPS_CFLAGS := $(shell pkg-config --cflags jansson libcurl yaml-0.1 2>/dev/null)
DEPS_LIBS   := $(shell pkg-config --libs jansson yaml-0.1 2>/dev/null || echo -ljansson -lyaml)
LIBS    := $(DEPS_LIBS) -lpthread -lm
# libcurl is opened when probe runs (src/probe/curl_api.h says why), so only
# its header is needed here. LINK_CURL=1 links it all the same, for the wheel:
# auditwheel bundles only what the binary links, and probe then finds it loaded.
ifeq ($(LINK_CURL),1)
LIBS    += -Wl,--no-as-needed $(shell pkg-config --libs libcurl 2>/dev/null || echo -lcurl)
endif
LIBDIRS := $(sort $(dir $(wildcard src/*/*.c src/*/*/*.c)))
# Library code sees the public headers and its own layers' headers; the CLI
# and tests see the same, so a public header never needs a path prefix.
INC     := -Iinclude/fp4forge $(addprefix -I,$(LIBDIRS))
CFLAGS  += $(CSTD) $(WARN) $(OPT) $(DEPS_CFLAGS) $(INC)
# The CLI sees the public headers only: it fills requests and prints, and a
# private header it needed would mean library work had leaked into it.
CLIFLAGS := $(CSTD) $(WARN) $(OPT) $(DEPS_CFLAGS) -Iinclude/fp4forge -Icli

SRC     := $(sort $(wildcard src/*/*.c src/*/*/*.c))
HDR     := $(wildcard include/fp4forge/*.h src/*/*.h src/*/*/*.h)
OBJ     := $(SRC:src/%.c=$(B)/obj/%.o)
# ar keeps members by file name: two library sources with one name would
# silently replace each other in the archive.
DUPNAMES := $(shell printf '%s\n' $(notdir $(SRC)) | sort | uniq -d)
$(if $(DUPNAMES),$(error library sources share a file name: $(DUPNAMES)))
CLISRC  := $(sort $(wildcard cli/*.c))
CLIHDR  := $(wildcard cli/*.h)
# The test build is the same code under ASan+UBSan, in its own folder so the
# release objects never mix with instrumented ones.
SAN     := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
TOBJ    := $(SRC:src/%.c=$(B)/tobj/%.o)
UNIT    := $(sort $(wildcard tests/unit/test_*.c))
UNITBIN := $(UNIT:tests/unit/%.c=$(B)/tests/%)

# libFuzzer harnesses (tests/fuzz): the library again, built by clang with the
# fuzzer's coverage hooks and the sanitizers, in its own object folder.
FUZZCC  ?= clang
FUZZSAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FOBJ    := $(SRC:src/%.c=$(B)/fobj/%.o)
FUZZSRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZBIN := $(FUZZSRC:tests/fuzz/%.c=$(B)/fuzz/%)

.PHONY: all clean test unit golden conformance demo bench bench-kernels bench-int4 bench-code-rows bench-mse cuda fuzz fuzz-build
all: $(B)/fp4forge

$(B)/obj/%.o: src/%.c $(HDR)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(B)/libfp4forge.a: $(OBJ)
	ar rcs $@ $^

$(B)/fp4forge: $(CLISRC) $(CLIHDR) $(B)/libfp4forge.a
	$(CC) $(CLIFLAGS) $(CLISRC) $(B)/libfp4forge.a $(LIBS) -o $@

$(B)/tobj/%.o: src/%.c $(HDR)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(SAN) -c $< -o $@

$(B)/libfp4forge-san.a: $(TOBJ)
	ar rcs $@ $^

$(B)/fp4forge-san: $(CLISRC) $(CLIHDR) $(B)/libfp4forge-san.a
	$(CC) $(CLIFLAGS) $(SAN) $(CLISRC) $(B)/libfp4forge-san.a $(LIBS) -o $@

# The sanitizer build once more, with every allocation the library, the CLI
# and jansson make passing through tests/faultsim/faultsim.c, which fails the
# Nth one on request (tests/golden/t_faultsim.sh counts down through them).
FAULTWRAP := -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,--wrap=strndup
$(B)/fp4forge-faultsim: $(CLISRC) $(CLIHDR) $(B)/libfp4forge-san.a tests/faultsim/faultsim.c
	$(CC) $(CLIFLAGS) $(SAN) $(CLISRC) tests/faultsim/faultsim.c $(B)/libfp4forge-san.a $(LIBS) $(FAULTWRAP) -o $@

$(B)/tests/%: tests/unit/%.c tests/unit/unit.h $(B)/libfp4forge-san.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(SAN) -Itests/unit $< $(B)/libfp4forge-san.a $(LIBS) -o $@

# Each tier records one line per check in $(B)/results.txt; run_all.sh prints
# the closing 'N passed, N failed' line and fails if any check failed.
unit: $(UNITBIN)
	@B=$(B) bash tests/run_all.sh unit

golden: $(B)/fp4forge-san $(B)/fp4forge $(B)/fp4forge-faultsim
	@B=$(B) bash tests/run_all.sh golden

conformance: $(B)/fp4forge
	@B=$(B) bash tests/run_all.sh conformance

# Unit and golden tests run under the sanitizers; the conformance tier uses the
# release binary because it pushes megabytes through the real peers.
test: $(UNITBIN) $(B)/fp4forge-san $(B)/fp4forge $(B)/fp4forge-faultsim $(FUZZBIN)
	@B=$(B) bash tests/run_all.sh unit golden fuzz conformance

$(B)/fobj/%.o: src/%.c $(HDR)
	@mkdir -p $(@D)
	$(FUZZCC) $(CSTD) $(WARN) -O1 -g $(DEPS_CFLAGS) $(INC) -fsanitize=fuzzer-no-link $(FUZZSAN) -c $< -o $@

$(B)/libfp4forge-fuzz.a: $(FOBJ)
	ar rcs $@ $^

$(B)/fuzz/%: tests/fuzz/%.c tests/fuzz/fuzz_util.h $(B)/libfp4forge-fuzz.a
	@mkdir -p $(@D)
	$(FUZZCC) $(CSTD) $(WARN) -O1 -g $(DEPS_CFLAGS) $(INC) -fsanitize=fuzzer $(FUZZSAN) $< $(B)/libfp4forge-fuzz.a $(LIBS) -o $@

fuzz-build: $(FUZZBIN)

# Each harness for FP4FORGE_FUZZ_SECONDS (12) from its seeds; CI runs this as
# the fuzz tier of make test.
fuzz: $(FUZZBIN)
	@B=$(B) bash tests/run_all.sh fuzz

demo: $(B)/fp4forge
	@bash tools/demo.sh $(B)/fp4forge

bench: $(B)/fp4forge
	@bash bench/run

# Each kernel alone, one core, bytes checked against the scalar kernel.
$(B)/bench-kernels: bench/kernels.c bench/bench_clock.h $(B)/libfp4forge.a
	$(CC) $(CFLAGS) -Isrc/kernels $< $(B)/libfp4forge.a $(LIBS) -o $@

bench-kernels: $(B)/bench-kernels
	@$(B)/bench-kernels

$(B)/bench-mse: bench/mse_kernels.c bench/bench_clock.h bench/bench_rand.h $(B)/libfp4forge.a
	$(CC) $(CFLAGS) -Isrc/kernels $< $(B)/libfp4forge.a $(LIBS) -o $@

$(B)/bench-int4: bench/int4_kernel.c bench/bench_clock.h bench/bench_rand.h $(B)/libfp4forge.a
	$(CC) $(CFLAGS) -Isrc/kernels $< $(B)/libfp4forge.a $(LIBS) -o $@

bench-int4: $(B)/bench-int4
	@$(B)/bench-int4

$(B)/bench-code-rows: bench/code_rows.c bench/bench_clock.h bench/bench_rand.h $(B)/libfp4forge.a
	$(CC) $(CFLAGS) -Isrc/kernels $< $(B)/libfp4forge.a $(LIBS) -o $@

bench-code-rows: $(B)/bench-code-rows
	@$(B)/bench-code-rows

bench-mse: $(B)/bench-mse
	@$(B)/bench-mse

# Folio sizes of a file's cached pages, and a first pass over it (docs/bench.md).
$(B)/bench-pagecache: bench/pagecache.c
	$(CC) $(CFLAGS) -O3 $< -lpthread -o $@

# One output written by one or two threads into one or two files (docs/bench.md).
$(B)/bench-write-files: bench/write_files.c bench/bench_clock.h
	$(CC) $(CFLAGS) $< -lpthread -o $@

clean:
	rm -rf $(B)

# Optional GPU path (issue 8): the same bytes from a CUDA kernel, measured on
# the H200 with cuda/run-device.sh. Needs nvcc; never part of `make test`.
NVCC ?= nvcc
$(B)/cuda/nvfp4_cuda.o: cuda/nvfp4_cuda.cu cuda/nvfp4_cuda.h
	@mkdir -p $(@D)
	$(NVCC) -O3 -std=c++17 -arch=sm_90 -fmad=false -prec-div=true -c $< -o $@

$(B)/fp4forge-cuda-bench: cuda/cuda_bench.c $(B)/cuda/nvfp4_cuda.o $(B)/libfp4forge.a
	$(CC) $(CFLAGS) -Icuda $< $(B)/cuda/nvfp4_cuda.o $(B)/libfp4forge.a $(LIBS) \
	    -L$(dir $(shell which $(NVCC)))../lib64 -lcudart_static -ldl -lrt -lstdc++ -o $@

cuda: $(B)/fp4forge-cuda-bench
