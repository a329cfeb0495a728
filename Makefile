# routed — build, test, demo. Run as root for the privileged tiers.
GO        ?= go
BIN       := bin
GOFLAGS   := -trimpath
LDFLAGS   := -s -w
BINARIES  := routed routed-etcd routed-controllers routedctl routed-cni routed-ipam routed-cni-full routed-ipam-full
PKG_routed      := ./routed/cmd/routed
# routed-etcd is `routed etcd` (the lab's and the demo's datastore), kept
# out of the node binary.
PKG_routed-etcd := ./routed/cmd/routed-etcd
PKG_routed-controllers := ./routed/cmd/routed-controllers
PKG_routedctl   := ./routed/cmd/routedctl
PKG_routed-cni  := ./cniplugin/cmd/routed-cni
PKG_routed-ipam := ./cniplugin/cmd/routed-ipam
# routed-cni and routed-ipam are the socket-only builds (cniplugin/fullbin:
# no etcd client, cheap to start); the -full builds do everything.
PKG_routed-cni-full  := ./cniplugin/cmd/routed-cni
PKG_routed-ipam-full := ./cniplugin/cmd/routed-ipam
TAGS_routed-cni  := cnithin
TAGS_routed-ipam := cnithin
# Test timeout per package (a guard against a hang; every wait in the
# tests has its own deadline). tests/k8s alone passed 20 minutes on a
# machine about 2x slower than usual (2026-12-02, the whole suite 48
# minutes there, about 22 on the usual one), and 40 minutes on a slower
# one still (fresh-clone run 114: cut off while progressing, 7.5 minutes
# into TestRealNodeRunsRouted's 18), hence 60. CI allows 90 for all.
TEST_TIMEOUT ?= 60m
MODULE = github.com/routed-net/routed
LONG_TESTS = ./tests/e2e ./tests/k8s
# TEST_FREE_KIB: the free space make test asks for (8 GiB).
TEST_FREE_KIB ?= 8388608

.PHONY: all build deps test test-space test-unit docs bench demo scale scale-big scale-calico-felix soak lint image image-docker k8s-demo k8s-netpol k8s-cnp k8s-policy-bench k8s-enforce clean $(BINARIES)

all: build

build: $(BINARIES)

$(BINARIES):
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build $(GOFLAGS) -tags '$(TAGS_$@)' -ldflags '$(LDFLAGS)' -o $(BIN)/$@ $(PKG_$@)

# deps installs what the test tiers need when missing: Debian packages
# (BIRD, gobgpd, qemu, reference CNI plugins...) and Go tools (cnitool,
# the reference ptp/host-local plugins at v1.9.1).
deps:
	./tests/ensure-deps.sh

# lint: gofmt, go vet and staticcheck (STATICCHECK_VERSION, installed
# from the Go module proxy into $(go env GOPATH)/bin when missing or at
# another version).
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK = $(shell $(GO) env GOPATH)/bin/staticcheck
lint:
	@bad=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$bad" ]; then echo "gofmt needed:"; echo "$$bad"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags cnithin ./cniplugin/...
	@$(STATICCHECK) -version 2>/dev/null | grep -qF '($(patsubst v%,%,$(STATICCHECK_VERSION)))' || \
		{ echo "lint: go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)"; \
		  GOFLAGS=-mod=mod $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION); }
	$(STATICCHECK) ./...
	$(STATICCHECK) -tags cnithin ./cniplugin/...

# test runs every tier: unit, privileged (netns, real kernel), integration
# (real etcd, BGP peers, CNI runtime) and the qemu IPIP VM tests.
test: test-space deps lint build
	@[ "$$(id -u)" = 0 ] || { echo "make test needs root (network namespaces, routes, nftables)"; exit 1; }
	@# The lab and cluster tiers (LONG_TESTS) mostly wait on timers and
	@# on the processes they start: they run beside the other packages
	@# and the race pass instead of after them; their output is printed
	@# when they end, each line tagged [long].
	@# The other passes (the lines below) are printed as they go and kept in
	@# test-main.log; a failure's lines are summed up at the very end,
	@# so that the tail of the output (all a CI page may keep) names
	@# the failed tests.
	@( ROUTED_BIN=$(CURDIR)/$(BIN) $(GO) test -timeout $(TEST_TIMEOUT) -count=1 $(LONG_TESTS) > $(BIN)/test-long.log 2>&1; \
	  echo $$? > $(BIN)/test-long.rc ) & long=$$!; \
	rc=0; : > $(BIN)/test-main.log; rm -f $(BIN)/test-main.failed; \
	{ ROUTED_BIN=$(CURDIR)/$(BIN) $(GO) test -timeout $(TEST_TIMEOUT) -count=1 $$($(GO) list ./... | grep -v -x $(LONG_TESTS:./%=-e $(MODULE)/%)) || touch $(BIN)/test-main.failed; } 2>&1 | tee -a $(BIN)/test-main.log; \
	{ $(GO) test -tags cnithin -count=1 ./cniplugin/... || touch $(BIN)/test-main.failed; } 2>&1 | tee -a $(BIN)/test-main.log; \
	{ ROUTED_BIN=$(CURDIR)/$(BIN) $(GO) test -race -short -timeout $(TEST_TIMEOUT) -count=1 ./pkg/... ./felix/... ./confd/... ./routed/bgp/... ./routed/status/... ./routed/daemon/... || touch $(BIN)/test-main.failed; } 2>&1 | tee -a $(BIN)/test-main.log; \
	[ ! -e $(BIN)/test-main.failed ] || rc=1; \
	wait $$long; sed 's/^/[long] /' $(BIN)/test-long.log; \
	[ "$$(cat $(BIN)/test-long.rc)" = 0 ] || { echo "make test: the long tier failed (one or more of $(LONG_TESTS); see below)"; rc=1; }; \
	if [ $$rc != 0 ]; then \
	  echo "make test: what failed (from $(BIN)/test-main.log and $(BIN)/test-long.log):"; \
	  awk -f .ci/failed.awk $(BIN)/test-main.log $(BIN)/test-long.log | tail -300; \
	fi; \
	exit $$rc

# test-space: a full disk fails tests deep inside etcd, containerd or
# the linker; make test says so first.
test-space:
	@for d in "$${TMPDIR:-/tmp}" "$$($(GO) env GOCACHE)"; do \
	  while [ ! -e "$$d" ]; do d=$$(dirname "$$d"); done; \
	  avail=$$(df -Pk "$$d" | awk 'NR==2 {print $$4}'); \
	  [ "$$avail" -ge $(TEST_FREE_KIB) ] || { echo "make test needs $$(($(TEST_FREE_KIB) / 1048576)) GiB free in $$d (the tests' etcd, containerd and binaries write there); it has $$((avail / 1024)) MiB. Free some (e.g. go clean -cache) and run again."; exit 1; }; \
	done

test-unit:
	$(GO) test -short -count=1 ./pkg/...

# docs regenerates the routedctl reference (docs/routedctl) from the
# commands themselves; routed/ctl/gendoc's test fails when it is stale.
docs:
	$(GO) run ./routed/ctl/gendoc -out docs/routedctl

# bench runs the benchmarks side by side with their baselines in the same
# run (ratios are reported as custom metrics); see docs/benchmarks.md.
# Each package gets an iteration count that makes its numbers meaningful:
# IPAM measures a rate, the others sample latencies or memory inside one
# iteration (a GC pass in a process of its own, a whole layout move).
BENCH = ROUTED_BIN=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -timeout 30m
bench: deps build
	@[ "$$(id -u)" = 0 ] || { echo "make bench needs root (network namespaces)"; exit 1; }
	{ $(BENCH) -bench . -benchtime 3x ./felix/routetable/ && \
	  $(BENCH) -bench 'AutoAssign|ReleaseByHandle|DecodeBorrowed' -benchtime 2000x ./pkg/ipam/ && \
	  $(BENCH) -bench 'GCHeap|LayoutMove' -benchtime 1x ./pkg/ipam/ ./routed/gc/ && \
	  $(BENCH) -bench . -benchtime 1x ./routed/bgp/bench/ && \
	  $(BENCH) -bench . -benchtime 1x ./tests/cni/ && \
	  $(BENCH) -bench . -benchtime 1x ./tests/ipamload/ && \
	  $(BENCH) -bench PodThroughput -benchtime 1x ./tests/e2e/ && \
	  $(BENCH) -bench PolicyDataplane -benchtime 1x ./tests/e2e/ && \
	  $(BENCH) -bench FlowCollection -benchtime 1x ./tests/e2e/ ; } | tee $(BIN)/bench.txt

demo: build
	./tests/ensure-deps.sh demo
	$(GO) run ./tests/demo -bin $(BIN)

# scale starts SCALE_NODES real routed nodes (own namespace and kernel
# routes each), 3 route reflectors and one etcd, creates pods in bursts
# and prints per-node cost and claim->FIB latency (docs/benchmarks.md).
SCALE_NODES ?= 100
scale: build
	@[ "$$(id -u)" = 0 ] || { echo "make scale needs root (network namespaces)"; exit 1; }
	$(GO) run ./tests/scale -bin $(BIN) -nodes $(SCALE_NODES)

# scale-big writes a datastore the size of a big cluster (issue 36: nodes
# with their blocks, pods, namespaces, policies, network sets), runs
# SCALE_BIG_REAL real routed nodes with pods of their own against it and
# whole-prefix etcd watches standing for the other nodes' (SCALE_BIG_WATCHERS;
# -1: one per node, more than two cores can serve and read: see the doc),
# then churns pods, policies and labels cluster-wide for SCALE_BIG_CHURN and
# prints per-node readiness, memory (anonymous and file-backed), CPU, feed
# lists and the time a remote pod takes to reach every real node's
# nftables set (docs/benchmarks.md). SCALE_BIG_ARGS passes more flags
# (go run ./tests/scale big -h lists them).
SCALE_BIG_NODES ?= 5000
SCALE_BIG_PODS ?= 150000
SCALE_BIG_NAMESPACES ?= 2000
SCALE_BIG_POLICIES ?= 2000
SCALE_BIG_NETSETS ?= 500
SCALE_BIG_REAL ?= 3
SCALE_BIG_WATCHERS ?= 100
SCALE_BIG_CHURN ?= 10m
SCALE_BIG_ARGS ?=
scale-big: build
	@[ "$$(id -u)" = 0 ] || { echo "make scale-big needs root (network namespaces)"; exit 1; }
	./tests/ensure-deps.sh demo
	$(GO) run ./tests/scale big -bin $(BIN) -nodes $(SCALE_BIG_NODES) -pods $(SCALE_BIG_PODS) \
		-namespaces $(SCALE_BIG_NAMESPACES) -policies $(SCALE_BIG_POLICIES) -netsets $(SCALE_BIG_NETSETS) \
		-real $(SCALE_BIG_REAL) -watchers $(SCALE_BIG_WATCHERS) -churn $(SCALE_BIG_CHURN) $(SCALE_BIG_ARGS)

# scale-calico-felix writes scale-big's cluster in Calico's etcdv3 format
# and runs Calico's own felix (v3.31.0, nftables; the binary tests/k8s
# TestCalicoFelixEnforcesOnKDD builds and caches) as one node against it:
# time to sync and program, anonymous and file-backed memory idle, after
# a pod churn and at peak, beside scale-big's routed nodes
# (docs/benchmarks.md). SCALE_CALICO_ARGS passes its flags (-nodes, -pods,
# -churn, ...).
SCALE_CALICO_ARGS ?=
scale-calico-felix: build
	@[ "$$(id -u)" = 0 ] || { echo "make scale-calico-felix needs root (network namespaces)"; exit 1; }
	$(GO) run ./tests/scale calico-felix -bin $(BIN) $(SCALE_CALICO_ARGS)

# soak churns pods and checks for leaks and growth (tests/soak);
# SOAK_ARGS passes its flags, e.g. the 3-member etcd run of
# docs/benchmarks.md: SOAK_ARGS='-warmup 10m -duration 30m -etcd-members 3 -leader-kill-every 5m'
# (the warm-up, leader kills included, is churned but not compared).
SOAK_ARGS ?=
soak: deps build
	@[ "$$(id -u)" = 0 ] || { echo "make soak needs root (network namespaces)"; exit 1; }
	$(GO) run ./tests/soak -bin $(BIN) $(SOAK_ARGS)

# image builds routed's image without a Docker engine (deploy/image):
# $(BIN)/routed-image.tar, for `docker load -i` or
# `ctr -n k8s.io images import`. image-docker builds the same with Docker.
IMAGE_TAG ?= routed:dev
image:
	$(GO) run ./deploy/image -o $(BIN)/routed-image.tar -tag $(IMAGE_TAG)

# k8s-demo brings up a real one-node Kubernetes cluster here (etcd,
# kube-apiserver, controller-manager, scheduler, containerd, kubelet,
# kube-proxy), installs routed from the shipped manifests and checks it;
# last line PASS or FAIL; everything is torn down (also on Ctrl-C).
k8s-demo: build
	@[ "$$(id -u)" = 0 ] || { echo "make k8s-demo needs root (network namespaces, containerd)"; exit 1; }
	./tests/ensure-deps.sh
	$(GO) run ./tests/k8s/demo/cmd -bin $(BIN)

# k8s-netpol brings up the same two-node cluster with routed and its
# controllers and runs Kubernetes' own NetworkPolicy specs (e2e.test of
# test/e2e/network/netpol and agnhost, built at the cluster's version)
# against it; failures print with their probe matrices; last line
# `netpol: P passed, F failed, S skipped`. NETPOL_FOCUS (a regexp over
# the specs' names) narrows them, e.g. NETPOL_FOCUS='default-deny';
# NETPOL_PARALLEL specs run at once, each in an e2e.test of its own.
# NETPOL_PASSED_IN (a copy of an earlier run's /tmp/routed-k8s-netpol/e2e/report)
# finishes a run that was cut short: its passed specs are not run again.
NETPOL_FOCUS ?=
NETPOL_PARALLEL ?= 2
NETPOL_PASSED_IN ?=
k8s-netpol: build
	@[ "$$(id -u)" = 0 ] || { echo "make k8s-netpol needs root (network namespaces, containerd)"; exit 1; }
	./tests/ensure-deps.sh
	$(GO) run ./tests/k8s/netpol/cmd -bin $(BIN) -focus '$(NETPOL_FOCUS)' -parallel $(NETPOL_PARALLEL) -passed-in '$(NETPOL_PASSED_IN)'

# k8s-cnp runs, on the same cluster with the ClusterNetworkPolicy CRD
# of deploy/crds, the conformance tests of sigs.k8s.io/network-policy-api
# (tests/k8s/cnpconf, built at the CRD's version); without SCTP in the
# kernel, SCTP pokes are not made and each is printed; failures print with
# what they saw; last line `cnp: P passed (Q of them without their N
# SCTP pokes), F failed, S skipped`.
# CNP_RUN (a go test -run regexp over the tests' names) narrows them.
CNP_RUN ?=
k8s-cnp: build
	@[ "$$(id -u)" = 0 ] || { echo "make k8s-cnp needs root (network namespaces, containerd)"; exit 1; }
	./tests/ensure-deps.sh
	$(GO) run ./tests/k8s/cnpconf/cmd -bin $(BIN) -run '$(CNP_RUN)'

# k8s-policy-bench times, on the cluster of k8s-demo with routed and its
# controllers, BENCH_N NetworkPolicy creations, deletions and pod label
# changes to their new verdict on both nodes (probes every 20 ms from
# the pods' own network namespaces); prints p50/p90/p99/max of each.
BENCH_N ?= 50
k8s-policy-bench: build
	@[ "$$(id -u)" = 0 ] || { echo "make k8s-policy-bench needs root (network namespaces, containerd)"; exit 1; }
	./tests/ensure-deps.sh
	$(GO) run ./tests/k8s/enforce/cmd -bin $(BIN) -bench $(BENCH_N)

# k8s-enforce runs, on the same cluster, the pod-start and restart-order
# checks of tests/k8s/enforce: continuous probe loops through pod
# creation and restarts of routed, its controllers and CNI ADDs.
k8s-enforce: build
	@[ "$$(id -u)" = 0 ] || { echo "make k8s-enforce needs root (network namespaces, containerd)"; exit 1; }
	./tests/ensure-deps.sh
	$(GO) run ./tests/k8s/enforce/cmd -bin $(BIN) -checks

image-docker:
	docker build -t $(IMAGE_TAG) -f deploy/Dockerfile .

clean:
	rm -rf $(BIN)
