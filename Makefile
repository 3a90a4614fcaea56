# kubebuilder's target names; each delegates to cargo / cargo xtask (Rust), nothing long in shell.
.DEFAULT_GOAL := help
CARGO ?= cargo
# install/uninstall/deploy/undeploy act with $(KUBECTL) on the cluster of KUBECONFIG (else
# ~/.kube/config, else the local control plane); deploy and build-installer set the image $(IMG).
KUBECTL ?= kubectl
IMG ?= app-operator:latest
export KUBECTL IMG

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

preflight: ## Check for Rust and a C toolchain before cargo builds anything (Go: when the tools build)
	@sh hack/preflight.sh

run: preflight ## Local control plane (if none) + CRDs + the operator in the foreground, samples applied
	$(CARGO) xtask run

test: preflight ## The whole suite on a local control plane (started and stopped if none runs)
	$(CARGO) xtask test

lint: ## cargo fmt --check, clippy -D warnings, cargo deny check (advisories, licences, bans, sources)
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings
	@# --all-targets leaves out `test = false` targets: the fault suite and the real-node suites.
	$(CARGO) clippy -p app-operator --test chaos --test real_node -p local-cluster --test real_node --locked -- -D warnings
	$(CARGO) xtask deny

manifests: ## Regenerate config/crd from the Rust types
	$(CARGO) xtask manifests

install: ## Install the CRDs into the cluster of KUBECONFIG (says which; local control plane if none)
	$(CARGO) xtask install

uninstall: ## Remove the CRDs from that cluster
	$(CARGO) xtask uninstall

deploy: ## Deploy the operator with image IMG to that cluster (config/default)
	$(CARGO) xtask deploy

undeploy: ## Remove the deployed operator (and its CRDs) from that cluster
	$(CARGO) xtask undeploy

build-installer: ## Write dist/install.yaml (CRDs, RBAC, Deployment with image IMG) for kubectl apply -f
	$(CARGO) xtask build-installer

image: ## Static binary in a one-layer OCI image archive (target/app-operator-image.tar) named IMG, no Docker needed
	$(CARGO) xtask image

release: preflight ## dist/: the image archive (IMG's repository, tagged with the version), install.yaml, the packaged chart, SHA256SUMS
	$(CARGO) xtask release

load: ## Push that image archive into the local cluster's registry (its real node pulls from it), as `kind load`
	$(CARGO) xtask load

bench: preflight ## Convergence and cost vs the plain-client floor, on its own control plane (target/bench/)
	@# The bench client is optimized too: built for debugging it took more CPU than the operator.
	$(CARGO) run --release --quiet --locked -p xtask -- bench $(BENCH_ARGS)

bench-stateful: preflight ## Stateful rounds on a real node (started if none runs): EtcdCluster (scale, upgrade, backup, restore) and SampleDB (create, backup and restore of 1 GiB, upgrade 15 -> 17), operator vs by hand (target/bench-stateful/)
	$(CARGO) run --release --quiet --locked -p xtask -- bench-stateful $(BENCH_STATEFUL_ARGS)

# A kubebuilder-style operator (hack/bench-operator, controller-runtime, built with Go) through
# the same rounds after ours; any other: see docs/benchmarks.md#your-operator.
BENCH_COMPARE = controller-runtime=target/bench-operator/bench-operator --metrics-bind-address={metrics} --health-probe-bind-address={health} --max-concurrent-reconciles=10 --zap-devel=false
bench-compare: preflight ## make bench with a controller-runtime operator through the same MyApp rounds, then SampleDB beside CloudNativePG on a real node
	cd hack/bench-operator && go build -mod=readonly -o ../../target/bench-operator/bench-operator .
	$(CARGO) run --release --quiet --locked -p xtask -- bench --compare "$(BENCH_COMPARE)" --compare-rbac hack/bench-operator/role.yaml $(BENCH_ARGS)
	$(CARGO) run --release --quiet --locked -p xtask -- bench-stateful --rounds sampledb --cloudnative-pg --output target/bench-compare-postgres $(BENCH_STATEFUL_ARGS)

test-real-node: preflight ## Only the real-node suites (the node's own life, then the samples with the operator deployed)
	$(CARGO) xtask test-real-node

test-oldest-kubernetes: preflight ## Only the suites make test runs on the oldest supported Kubernetes minor (README's table)
	$(CARGO) xtask test-oldest-kubernetes

chaos: preflight ## The fault suite (every row of docs/architecture.md's fault table, serially), the fuzzer, the real node's long data scenarios and node restart (~45 min warm)
	$(CARGO) xtask chaos $(CHAOS_ARGS)

# NODE=kwok: simulated nodes (Pods reported Running, nothing runs; cheap); NODE=real: a kubelet
# node with containerd, CNI, kube-proxy and CoreDNS, whose Pods run.
NODE ?= kwok
cluster-up: ## Start the local control plane (etcd, apiserver, controller-manager, scheduler) and a node (NODE=kwok|real)
	$(CARGO) xtask cluster-up --node $(NODE)

cluster-down: ## Stop every process of the local control plane and remove its state
	$(CARGO) xtask cluster-down

tools: ## Build (or find cached) the pinned upstream binaries
	$(CARGO) xtask tools

.PHONY: help preflight run test test-real-node chaos lint manifests install uninstall deploy undeploy build-installer image load bench bench-stateful bench-compare cluster-up cluster-down tools
