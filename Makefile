# Thin wrapper over CMake: the two commands README.md gives, plus bench.
MAKEFLAGS += --no-print-directory
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps build install run test node-deps bench asan tsan fuzz format clean

all: build

deps:
	@./scripts/install-deps.sh

$(BUILD)/Makefile: CMakeLists.txt
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# libtroupe.so.0 and libtroupe.a, the headers under include/troupe,
# troupe.pc, the CMake package, the troupe tool and its manual
# (docs/embedding.md); DESTDIR is honoured.
PREFIX ?= /usr/local
install: build
	@cmake --install $(BUILD) --prefix $(PREFIX)

# The main job: the flagship example against an embedded RocksDB under ./data.
run: build
	./$(BUILD)/examples/flagship --data ./data

# The Node binding's tests need its npm packages (bindings/node's lock):
# npm ci when node_modules is missing or older than the lock.
test: build node-deps
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS); rc=$$?; \
	  ./../scripts/test-summary.sh . ; exit $$rc

# The BullMQ peer's npm packages (pinned in bench/peers/bullmq/package-lock.json)
# are installed with npm ci when node_modules is missing or older than the lock.
BULLMQ_PEER := bench/peers/bullmq
# koffi for the Node binding and the raw koffi peer (bindings/node's lock).
NODE_BINDING := bindings/node

node-deps:
	@if command -v npm >/dev/null && \
	   { [ ! -f $(NODE_BINDING)/node_modules/.package-lock.json ] || \
	     [ $(NODE_BINDING)/package-lock.json -nt $(NODE_BINDING)/node_modules/.package-lock.json ]; }; then \
	  echo "make: npm ci in $(NODE_BINDING)"; \
	  (cd $(NODE_BINDING) && npm ci --no-audit --no-fund) || \
	    echo "make: npm ci failed; the Node binding's tests and benches will fail" >&2; \
	fi

bench: deps node-deps
	@./scripts/install-deps.sh --bench
	@if [ ! -f $(BULLMQ_PEER)/node_modules/.package-lock.json ] || \
	    [ $(BULLMQ_PEER)/package-lock.json -nt $(BULLMQ_PEER)/node_modules/.package-lock.json ]; then \
	  echo "make bench: npm ci in $(BULLMQ_PEER)"; \
	  (cd $(BULLMQ_PEER) && npm ci --no-audit --no-fund) || \
	    echo "make bench: npm ci failed; the BullMQ peer will be missing" >&2; \
	fi
	@cmake -S . -B $(BUILD)-bench -DCMAKE_BUILD_TYPE=Release -DTROUPE_TESTS=OFF \
	  -DTROUPE_BENCH=ON >/dev/null
	@cmake --build $(BUILD)-bench -j $(JOBS)
	@./bench/run.sh $(BUILD)-bench

asan: deps
	@cmake -S . -B $(BUILD)-asan -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug \
	  -DCMAKE_C_FLAGS=-O1 -DTROUPE_ASAN=ON >/dev/null
	@cmake --build $(BUILD)-asan -j $(JOBS)
	@cd $(BUILD)-asan && ctest --output-on-failure -j $(JOBS) -LE slow

tsan: deps
	@cmake -S . -B $(BUILD)-tsan -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug \
	  -DCMAKE_C_FLAGS=-O1 -DTROUPE_TSAN=ON >/dev/null
	@cmake --build $(BUILD)-tsan -j $(JOBS)
	@cd $(BUILD)-tsan && TSAN_OPTIONS=ignore_noninstrumented_modules=1 \
	  ctest --output-on-failure -j $(JOBS) -LE slow

# Every libFuzzer target (tests/fuzz, docs/fuzzing.md) for FUZZ_SECONDS each
# (default 20); a crash fails the run and leaves its reproducer under
# $(BUILD)-fuzz/crashes/.
fuzz: deps
	@src=$$(./scripts/fetch-msgpack-src.sh $(BUILD)-fuzz/msgpack-src) && \
	cmake -S . -B $(BUILD)-fuzz -DCMAKE_C_COMPILER=clang -DTROUPE_FUZZ=ON \
	  -DTROUPE_TESTS=OFF -DTROUPE_MSGPACK_SRC=$$(realpath $$src) >/dev/null
	@cmake --build $(BUILD)-fuzz -j $(JOBS) --target troupe_fuzz_all
	@FUZZ_SECONDS=$${FUZZ_SECONDS:-20} ./tests/fuzz/run.sh $(BUILD)-fuzz

format: deps
	@clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h')
	@./scripts/check-layout.sh --self-test .

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan $(BUILD)-bench $(BUILD)-fuzz
