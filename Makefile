# The two commands of the README, and their parts.
#   make demo   install, build (Release) and train examples/fashion-mnist.yaml locally; the
#               trained model is left in build/fashion-mnist.onnx
#   make test   install, build and run every test with ctest
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: deps build demo test fuzz tsan asan tidy format format-check asan-build tsan-build bench bench-operator bench-tta clean cluster-tools cluster cluster-down k8s-e2e k8s-nodes image multihost

deps:
	./scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	./$(BUILD)/adam run examples/fashion-mnist.yaml --model-out $(BUILD)/fashion-mnist.onnx

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

clean: cluster-down
	rm -rf $(BUILD) build-tsan build-asan build-tsan.log build-asan.log

# A local Kubernetes cluster (tests/cluster/): etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, the kubelet, kube-proxy, kwok and helm at pinned releases, CoreDNS
# (tests/cluster/coredns) and Kueue (tests/cluster/kueue), built from Go modules once into
# ~/.cache/adam/cluster (keyed by their go.sum files).
cluster-tools: deps
	./tests/cluster/build.sh >/dev/null

# Starts it (4 real nodes in 2 zones: Docker containers running containerd and the kubelet, with
# Adam's image loaded) and prints the KUBECONFIG to use; cluster-down stops it.
cluster: cluster-tools image
	./tests/cluster/cluster.sh up

cluster-down:
	./tests/cluster/cluster.sh down

# The operator, chart and CRD against that control plane, on 6 fake (kwok) nodes in 3 zones
# (tests/cluster/e2e/).
k8s-e2e: build cluster-tools
	./tests/cluster/e2e.sh

# Adam on real nodes: the chart's operator pods, the demo trained, start failures shown
# (tests/cluster/nodes/; rebuilds the image first when it holds another build/adam).
k8s-nodes: build cluster-tools
	./tests/cluster/nodes-e2e.sh

# The image (docker/Dockerfile) built on this machine's Docker Engine with no registry: its Debian
# base made by mmdebstrap (docker/base.sh), the adam binary `make build` made, then checked
# (adam --version, validate, non-root, no build tools). ADAM_IMAGE_FROM_SOURCE=1 compiles in it.
image: build
	./docker/image.sh

# Both examples with every role in its own container of that image, on two Docker networks (the
# pod network and the replication one), and faults across them: kills, pauses, partitions
# (tests/multihost/; rebuilds the image first when it holds another build/adam).
multihost: build
	./tests/multihost/run.sh

fuzz: deps
	./scripts/fuzz.sh

# ThreadSanitizer over the race-free parts (clang build in build-tsan/).
tsan: deps
	./scripts/tsan.sh

# Only its build (CI builds it while other stages run).
tsan-build: deps
	./scripts/tsan.sh --build-only

# clang-format (.clang-format) over every C++ file: format rewrites them, format-check fails
# naming each file that is not clean (and a file over 700 lines, a clock read outside
# core/clock.h, a helper defined twice in one unity batch: scripts/format.sh).
format: deps
	./scripts/format.sh

format-check: deps
	./scripts/format.sh --check

# clang-tidy's chosen checks (.clang-tidy) over every .cc of workers/ and operator/, with the
# compile commands of build/; any finding fails. A file whose preprocessed text, flags and checks
# were seen clean is skipped (~/.cache/adam/tidy and .ci/tidy.sums, which a clean run rewrites).
tidy: build
	./scripts/tidy.sh

# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/).
asan: deps
	./scripts/asan.sh

# Only its build (CI builds it while other stages run).
asan-build: deps
	./scripts/asan.sh --build-only

# The operator at scale on the local control plane (1,000 kwok nodes, 100 AdamJobs of 28 pods):
# docs/reference/performance.md has the table. Not part of CI.
bench-operator: build cluster-tools
	./bench/operator.sh

# Time to accuracy against PyTorch (bench/tta.py): each example with `adam run`, then PyTorch with
# the same model, recipe and trainer threads for up to 3 times our time; prints the seconds to
# 91-94% for each and writes build/bench/tta.json. Not part of CI (the best example alone trains
# for about 12 minutes on 2 cores).
bench-tta: build
	ADAM_INSTALL_BENCH=1 ./scripts/install-deps.sh
	mkdir -p $(BUILD)/bench
	/usr/bin/python3 bench/tta.py --build $(BUILD)

# Benchmarks: the parameter server against a memory-bandwidth triad, the controller's Raft against
# a 3-member etcd, the trainer against PyTorch (installs python3-torch and etcd-server), on an
# AVX-512 CPU again with both capped at AVX2 (what an AVX2 CPU runs); prints tables, writes
# build/bench/*.json.
bench: build
	ADAM_INSTALL_BENCH=1 ./scripts/install-deps.sh
	mkdir -p $(BUILD)/bench
	/usr/bin/python3 bench/machine.py --json $(BUILD)/bench/machine.json
	$(BUILD)/bench/ps_bench --json $(BUILD)/bench/ps.json
	$(BUILD)/bench/raft_bench --failovers 10 --json $(BUILD)/bench/raft.json
	/usr/bin/python3 bench/failover.py --build $(BUILD)
	/usr/bin/python3 bench/image_folder.py --build $(BUILD)
	/usr/bin/python3 bench/trainer.py --build $(BUILD) --tta 0.91
	if grep -q ' avx512f' /proc/cpuinfo; then /usr/bin/python3 bench/trainer.py --build $(BUILD) --isa avx2; fi
	$(BUILD)/bench/codec_bench --json $(BUILD)/bench/codec.json
	/usr/bin/python3 bench/communication.py --build $(BUILD)
	/usr/bin/python3 bench/elastic.py --build $(BUILD)
	/usr/bin/python3 bench/split.py --build $(BUILD)
	/usr/bin/python3 bench/thread_cpu.py --build $(BUILD) examples/fashion-mnist-ha.yaml
	/usr/bin/python3 bench/demo.py --build $(BUILD) --out $(BUILD)/bench/demo.json
