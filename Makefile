# The two commands of the README, and their parts.
#   make demo   install, build (Release) and train examples/fashion-mnist.yaml locally
#   make test   install, build and run every test with ctest
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: deps build demo test fuzz tsan asan bench clean

deps:
	./scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	./$(BUILD)/adam run examples/fashion-mnist.yaml

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

clean:
	rm -rf $(BUILD) build-tsan build-asan build-tsan.log build-asan.log

fuzz: deps
	./scripts/fuzz.sh

# ThreadSanitizer over the race-free parts (clang build in build-tsan/).
tsan: deps
	./scripts/tsan.sh

# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/).
asan: deps
	./scripts/asan.sh

# Benchmarks: the parameter server against a memory-bandwidth triad, the controller's Raft against
# a 3-member etcd, the trainer against PyTorch (installs python3-torch and etcd-server); prints
# tables, writes build/bench/*.json.
bench: build
	ADAM_INSTALL_BENCH=1 ./scripts/install-deps.sh
	mkdir -p $(BUILD)/bench
	$(BUILD)/bench/ps_bench --json $(BUILD)/bench/ps.json
	$(BUILD)/bench/raft_bench --failovers 10 --json $(BUILD)/bench/raft.json
	/usr/bin/python3 bench/failover.py --build $(BUILD)
	/usr/bin/python3 bench/trainer.py --build $(BUILD) --tta 0.91
