#!/usr/bin/env bash
# Installs what the test tiers need, only when missing; safe to re-run.
# With the argument "demo" it installs only what `make demo` needs (BIRD,
# iproute2, ping and cnitool), so the demo starts in minutes on a fresh
# machine instead of waiting for the test tiers' kube-apiserver build.
set -euo pipefail
mode=${1:-test}

need_apt=()
have() { command -v "$1" >/dev/null 2>&1; }
want_pkg() { dpkg -s "$1" >/dev/null 2>&1 || need_apt+=("$1"); }

if [ "$(id -u)" = 0 ]; then
	have ip || want_pkg iproute2
	have ping || want_pkg iputils-ping
	have bird || want_pkg bird2
	if [ "$mode" = test ]; then
		have gobgpd || want_pkg gobgpd
		have vtysh || want_pkg frr   # routed/bgp: FRR as a real peer
		have qemu-system-x86_64 || want_pkg qemu-system-x86
		have cpio || want_pkg cpio
		[ -x /bin/busybox ] || want_pkg busybox-static
		[ -x /usr/lib/cni/portmap ] || want_pkg containernetworking-plugins
		have kubectl || want_pkg kubectl
		have tcpdump || want_pkg tcpdump
		have nft || want_pkg nftables   # tests/e2e: cutting a node off from etcd (tests/lab/etcdcluster.go)
		have iperf3 || want_pkg iperf3   # make bench: pod-to-pod throughput
		have containerd || want_pkg containerd   # tests/k8s: the image runs under a real runtime
		[ -x /usr/sbin/runc ] || want_pkg runc
		have curl || want_pkg curl   # tests/k8s: routed-cluster-gc's /livez, where its liveness probe looks
		have ipset || want_pkg ipset   # tests/k8s: Calico's felix lists ipsets at start even in nftables mode
		have iptables-legacy-save && have iptables-nft-restore || want_pkg iptables   # tests/k8s: Calico's felix in iptables mode, either backend
		have chromium || want_pkg chromium   # routed/flowagg: the flows page in headless Chromium (chromedp)
	fi
	if [ ${#need_apt[@]} -gt 0 ]; then
		echo "ensure-deps: installing ${need_apt[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
	fi
else
	echo "ensure-deps: not root; skipping apt packages"
fi

# Go tools: a real CNI runtime client and the reference plugins (spec
# 1.1.0) used as the benchmark baseline and for chaining tests.
gobin="$(go env GOPATH)/bin"
install_go() { # name module@version
	[ -x "$gobin/$1" ] && return 0
	echo "ensure-deps: go install $2"
	GOFLAGS=-mod=mod go install "$2"
}
install_go cnitool github.com/containernetworking/cni/cnitool@v1.3.1
[ "$mode" = demo ] && exit 0
install_go ptp github.com/containernetworking/plugins/plugins/main/ptp@v1.9.1
install_go host-local github.com/containernetworking/plugins/plugins/ipam/host-local@v1.9.1
install_go portmap github.com/containernetworking/plugins/plugins/meta/portmap@v1.9.1
install_go bandwidth github.com/containernetworking/plugins/plugins/meta/bandwidth@v1.9.1

# A real kube-apiserver for the manifest and Kubernetes-path tests
# (tests/k8s): built from the Go module proxy once (~6 minutes on 2
# cores), then cached under /var/cache/routed-test.
if [ "$(id -u)" = 0 ]; then
	(cd "$(dirname "$0")/.." && go run ./tests/k8s/prebuild >/dev/null)
fi
