# The two commands: `make test` (what CI runs) and `make demo`.
GO ?= go

.PHONY: test demo deps deps-viewer deps-windows vet shaders shader-duplicates bench build dist hooks

deps: hooks
	@tools/deps.sh

# The repository's git hooks (tools/githooks: commit-msg refuses subjects
# over 72 characters), in a git checkout.
hooks:
	@if git rev-parse --git-dir >/dev/null 2>&1; then git config core.hooksPath tools/githooks; fi

# The viewer window (vkattn view) builds with the "viewer" tag, against the
# X11 headers GLFW needs; everything else builds without them.
deps-viewer:
	@tools/deps.sh --viewer

# The Windows cross-build (mingw-w64) and Wine to run it under.
deps-windows:
	@tools/deps.sh --windows

# SPIR-V freshness, go vet, the plain-Go packages without cgo (no Vulkan
# driver needed), then the rest of the suite with the Vulkan validation layer on
# (any validation message fails it) and, beside it, the tests of a device
# shared by goroutines and closed under load again under the race detector
# (in the root, the KV cache's package and vk).
RACE_TESTS = Concurrent|Cancelled|AfterDeviceClose|InFlight|StagingArea
RACE_PACKAGES = . ./kv ./vk

# The commands that mostly compile run with GOGC=400: at Go's default of
# 100 the compiler and linker spend a seventh of their CPU time collecting
# garbage (`go build ./...` from an empty build cache: 117 s of CPU, 101 s
# with 400). The suite's test binaries run with Go's default
# (SUITE_EXEC), as users' programs do.
BUILD = GOGC=400
SUITE_EXEC = -exec 'env GOGC=100'

# go vet ./... runs every analyzer on every package first, so the test
# runs after it leave off go test's own vet (a subset of the same checks,
# on the same files: some 30 s of CPU for the suite's test binaries).
GOTEST = $(GO) test -vet=off

# The plain-Go packages whose tests are the same with and without cgo:
# they run once, without it, before the suite, which leaves them out
# (weights has tests that open a device, so it runs in both).
CGO_FREE = ./core/... ./pipelines ./reference/... ./internal/golden/... ./internal/verdict ./internal/apidoc

# lavapipe compiles each kernel variant at its first dispatch, and a cold
# run of the suite is mostly that (some 300 variants). GALLIVM_PERF=nopt
# turns off the LLVM optimisation passes of lavapipe's JIT (GPU drivers
# ignore it): the same SPIR-V and the same results, compiled in about two
# thirds of the time and run more slowly. Mesa keys its shader cache by that
# setting, so OPTIMISED_TESTS, the golden cases on lavapipe's own plans
# (its texel default and the storage path), run once more on the optimised
# code lavapipe users get (the GPU vendors' plans run on their own
# compilers, never on lavapipe's optimised JIT).
# The suite pins lavapipe at 256-bit vectors (8-lane subgroups), the width
# llvmpipe picks by itself; vkattn asks for 512 (16 lanes) on CPUs with
# AVX-512, which the widths leg and OPTIMISED_TESTS (run at the default)
# cover.
TEST_ENV = VKATTN_VALIDATION=1 GALLIVM_PERF=nopt LP_NATIVE_VECTOR_WIDTH=256
OPTIMISED_TESTS = TestGoldenCases$$/^(auto|storage)$$

# The cooperative-matrix kernel runs on Mesa 26's lavapipe, which
# tools/lavapipe26.sh fetches and runs a test binary on; there the
# Coopmat tests fail, rather than skip, if the device has no matrices.
# The attention's are the root's, the MHA layer's dense layers nn's.
COOPMAT_TESTS = Coopmat
COOPMAT_PACKAGES = . ./nn

# Each fuzz target runs a fixed number of inputs (some 5-10 s of CPU
# each here, on two workers): a -fuzztime in seconds races Go's fuzzing
# coordinator against its own deadline and can fail with "context deadline
# exceeded" and no crasher (golang/go#75804, open in Go 1.26).
FUZZ_EXECS = 10000x
# Without cgo the weights tests leave out the one that opens a device, and
# with the fuzzing tag the two that check against npyio and the float64
# reference (they run in the suite), so the fuzzing build instruments the
# decoders, core and the standard library, not the engine, gonum or npyio.
FUZZ = $(BUILD) CGO_ENABLED=0 $(GOTEST) -tags fuzzing -run '^$$' -fuzztime $(FUZZ_EXECS) -fuzzminimizetime 100x

# Then the viewer build: its vet, and the window tests on a virtual X server.
# The whole suite and the legs (fuzzing included) are independent of each
# other: the legs run two at a time beside the suite at a lower priority,
# so they take the CPU time the suite leaves idle (the root package, the
# long pole, keeps one core busy and the other only in part) and the rest
# once it ends. Each one's output is printed whole when it ends.
test: deps-viewer
	tools/glslc.sh --check
	$(BUILD) $(GO) vet ./...
	$(BUILD) $(GO) vet -tags viewer ./viewer/... ./cmd/vkattn
	CGO_ENABLED=0 $(GOTEST) -count=1 $(CGO_FREE) ./weights/...
	$(MAKE) --no-print-directory -j2 --output-sync=target test-suite test-legs

# The legs of make test beside the suite (each installs what make test
# does, once however many run).
.PHONY: test-suite test-legs test-optimised test-coopmat test-view test-race test-fuzz test-widths test-windows
# go test starts the packages in the order given, two at a time: the root
# package's first (the longest), the CLI's last, so that the kernels its
# commands share with the root's tests are more often in Mesa's cache by
# then than compiled beside them.
SUITE_LAST = ./cmd/vkattn
test-suite: deps-viewer
	$(BUILD) $(TEST_ENV) $(GOTEST) $(SUITE_EXEC) -count=1 -timeout 40m $$($(GO) list ./... | grep -vxF "$$($(GO) list $(CGO_FREE) $(SUITE_LAST))") $(SUITE_LAST)
# The legs' make takes two jobs of its own: its MAKEFLAGS keep the command
# line's variables and flags but not the outer jobserver. The two longest
# start first, beside the suite: the race leg (its tests run several times
# slower under the race detector, on one core) and the Windows leg (the
# cross-build); the short ones fill both cores once the suite ends.
test-legs: deps-viewer
	nice -n 10 env MAKEFLAGS='$(filter-out -j% --jobserver%,$(MAKEFLAGS))' $(MAKE) --no-print-directory -j2 --output-sync=target test-race test-windows test-coopmat test-widths test-fuzz test-optimised test-view
test-optimised: deps-viewer
	VKATTN_VALIDATION=1 $(GOTEST) -count=1 -timeout 10m -run '$(OPTIMISED_TESTS)' .
test-coopmat: deps-viewer
	t=$$(mktemp -d) && ( for p in $(COOPMAT_PACKAGES); do \
	    $(BUILD) $(GOTEST) -c -o $$t/p.test $$p && \
	    $(TEST_ENV) VKATTN_REQUIRE_COOPMAT=1 tools/lavapipe26.sh $$t/p.test -test.count=1 -test.timeout 10m -test.run '$(COOPMAT_TESTS)' || exit 1; \
	  done ); \
	  s=$$?; rm -rf $$t; exit $$s
test-view: deps-viewer
	$(TEST_ENV) $(GOTEST) -count=1 -timeout 10m -tags viewer -run 'TestView' ./cmd/vkattn
	$(TEST_ENV) $(GOTEST) -count=1 -timeout 10m -tags viewer -run 'TestPresentationObjects' ./vk
test-race: deps-viewer
	$(BUILD) $(TEST_ENV) $(GOTEST) -race -count=1 -timeout 20m -run '$(RACE_TESTS)' $(RACE_PACKAGES)
# Subgroup widths: the suite runs lavapipe's subgroups at 8 lanes, this
# leg at 4 (LP_NATIVE_VECTOR_WIDTH=128) and 16 (512, vkattn's default on
# AVX-512 CPUs; llvmpipe's wider emulation is not trustworthy on AVX2).
# The cases whose kernels depend on the width (subgroup reductions and
# shuffles, query heads packed into rows, split-K, lanes per row beside
# narrow heads, loop budgets) run at both, on
# lavapipe's own plan and NVIDIA's, AMD's and Intel's; each run of the
# test binary opens every plan's devices. Each kernel variant compiles anew
# at each width, so the leg keeps to a few cases per plan: the prefill
# sweep on Intel's tiles (16 x 16), the decode sweeps at head widths 8 and
# 64 (the wider ones compile longest and share the width logic), and the
# KV cache's decode step (WIDTH_RUNS_KV, package kv's test binary). It
# first checks that the driver took the width.
WIDTH_VECTORS = 128 512
WIDTH_RUNS = 'TestGPUPlansNameTiledKernels|TestLongLoops(RowKernel|Tiled)$$' \
  'TestGoldenCases$$/(auto|nvidia)$$' \
  'TestAttentionBackwardEveryPlan/(auto|amd)/GQA' \
  'TestSweepGPUPlans/intel' \
  'TestDecode(GPUPlans|SplitK)//[0-9]+/_dk(8|64)_dv(8|64)_'
WIDTH_RUNS_KV = 'TestDecodeStep$$'
test-widths: deps-viewer
	t=$$(mktemp -d) && $(BUILD) $(GOTEST) -c -o $$t/vkattn.test . && $(BUILD) $(GOTEST) -c -o $$t/kv.test ./kv && \
	  $(BUILD) $(GO) build -o $$t/vkattn ./cmd/vkattn && ( \
	  for w in $(WIDTH_VECTORS); do \
	    LP_NATIVE_VECTOR_WIDTH=$$w $$t/vkattn devices | grep -Eq "subgroup size +$$((w / 32)) " || \
	      { echo "LP_NATIVE_VECTOR_WIDTH=$$w: no $$((w / 32))-lane subgroups"; exit 1; }; \
	    for run in $(WIDTH_RUNS); do \
	      echo "LP_NATIVE_VECTOR_WIDTH=$$w -run $$run"; \
	      $(TEST_ENV) LP_NATIVE_VECTOR_WIDTH=$$w $$t/vkattn.test -test.count=1 -test.timeout 10m -test.run "$$run" || exit 1; \
	    done; \
	    for run in $(WIDTH_RUNS_KV); do \
	      echo "LP_NATIVE_VECTOR_WIDTH=$$w kv -run $$run"; \
	      $(TEST_ENV) LP_NATIVE_VECTOR_WIDTH=$$w $$t/kv.test -test.count=1 -test.timeout 10m -test.run "$$run" || exit 1; \
	    done; \
	  done ); \
	  s=$$?; rm -rf $$t; exit $$s
# vkattn.exe and the root package's test binary, cross-built, under Wine on
# lavapipe: devices, verify, the worked example, outputs, Ctrl-C, and a
# slice of the suite (tools/wine.sh says which). GALLIVM_PERF=nopt as the
# suite's: Wine's Vulkan is the host's lavapipe, whose shader cache then
# serves both.
test-windows: deps-windows
	$(BUILD) GALLIVM_PERF=nopt GO=$(GO) tools/wine.sh
test-fuzz:
	$(FUZZ) -fuzz '^FuzzDecodeNPY$$' ./weights
	$(FUZZ) -fuzz '^FuzzDecodeNPZ$$' ./weights
	$(FUZZ) -fuzz '^FuzzDecodeSafetensors$$' ./weights

demo: deps
	$(GO) run ./cmd/vkattn demo

# vkattn with the viewer window; 'go build ./cmd/vkattn' builds it without.
build: deps-viewer
	$(GO) build -tags viewer -o vkattn ./cmd/vkattn

# The binaries to download: dist/vkattn (linux/amd64, with the viewer) and
# dist/vkattn.exe (windows/amd64); tools/wine.sh dist/vkattn.exe runs the
# latter under Wine.
dist: deps-viewer deps-windows
	GO=$(GO) tools/dist.sh

# Rebuild shaders/*.spv after editing a GLSL source or shaders/manifest.txt.
shaders: deps
	tools/glslc.sh

# The runs of lines the shaders repeat, as the duplicates command lists
# them (a developer's tool, not part of make test: where it is not
# installed the script says so and exits 0).
shader-duplicates:
	@tools/shader-duplicates.sh

# Every preset suite of the CLI harness (long takes minutes on lavapipe),
# then the Go benchmarks.
bench: deps
	$(GO) run ./cmd/vkattn bench --suite all
	$(GO) test -run '^$$' -bench . -benchtime 3x . ./nn
