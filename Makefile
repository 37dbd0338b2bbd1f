# The two commands: `make test` (what CI runs) and `make demo`.
GO ?= go

.PHONY: test demo deps vet shaders bench build

deps:
	@tools/deps.sh

# SPIR-V freshness, go vet, then the whole suite with the Vulkan validation
# layer on (any validation message fails it), then the tests of a device
# shared by goroutines and closed under load again under the race detector.
RACE_TESTS = Concurrent|Cancelled|AfterDeviceClose|InFlight

test: deps
	tools/glslc.sh --check
	$(GO) vet ./...
	VKATTN_VALIDATION=1 $(GO) test -count=1 -timeout 40m ./...
	VKATTN_VALIDATION=1 $(GO) test -race -count=1 -timeout 20m -run '$(RACE_TESTS)' . ./vk

demo: deps
	$(GO) run ./cmd/vkattn demo

build:
	$(GO) build -o vkattn ./cmd/vkattn

# Rebuild shaders/*.spv after editing a GLSL source or shaders/manifest.txt.
shaders: deps
	tools/glslc.sh

# Every preset suite of the CLI harness (long takes minutes on lavapipe),
# then the Go benchmarks.
bench: deps
	$(GO) run ./cmd/vkattn bench --suite all
	$(GO) test -run '^$$' -bench . -benchtime 3x .
