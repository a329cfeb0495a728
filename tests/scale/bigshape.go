package main

import (
	"flag"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"
)

// shape is the simulated cluster's size and mix.
type shape struct {
	nodes, real, pods, realPods int
	namespaces, policies        int
	localPolicies, netsets      int
	gnpShare, track             float64
	blockBits                   int
	pool                        netip.Prefix
}

// bigFlags are `scale big`'s options.
type bigFlags struct {
	sh                      shape
	bin, dir                string
	keep, restart           bool
	restartWithoutCache     bool
	listProbe               int
	watchers, watchConns    int
	workers, inFlight       int
	churn, idle             time.Duration
	creates, deletes        float64
	policyEvery, labelEvery time.Duration
	compactEvery            time.Duration
	readyTimeout            time.Duration
	seed                    uint64
	// clusterGC is who runs the cluster-wide GC pass: "process" (routed
	// cluster-gc, the nodes with --cluster-gc=false) or "nodes".
	clusterGC string
	// heapProfiles is where each real node's heap profiles go ("": none).
	heapProfiles string
}

// clusterFlags are the cluster's size flags of the modes that write a
// big cluster; whose names the nodes and pods the cluster's own (real)
// ones.
func clusterFlags(fs *flag.FlagSet, sh *shape, whose string) {
	fs.IntVar(&sh.nodes, "nodes", 5000, "nodes in the cluster, "+whose+" included")
	fs.IntVar(&sh.pods, "pods", 150000, "pods in the cluster, "+whose+" included")
	fs.IntVar(&sh.namespaces, "namespaces", 2000, "namespaces (each a kns. and a ksa. profile)")
	fs.IntVar(&sh.policies, "policies", 2000, "policies: NetworkPolicies and GlobalNetworkPolicies, "+whose+" pods' own included")
	fs.Float64Var(&sh.gnpShare, "gnp-share", 0.25, "share of the simulated policies that are GlobalNetworkPolicies")
}

func parseBigFlags(args []string) (*bigFlags, error) {
	f := &bigFlags{}
	fs := flag.NewFlagSet("scale big", flag.ExitOnError)
	fs.StringVar(&f.bin, "bin", "bin", "directory with routed, routedctl, routed-cni and routed-ipam")
	fs.StringVar(&f.dir, "dir", "", "work directory (default: a temporary one, removed after a run that passed)")
	fs.BoolVar(&f.keep, "keep", false, "keep the work directory (logs, etcd data)")
	clusterFlags(fs, &f.sh, "the real nodes'")
	fs.IntVar(&f.sh.localPolicies, "local-policies", 10, "NetworkPolicies of the real pods' namespace, each allowing one Deployment of a team's namespaces in (their sets hold remote pods)")
	fs.IntVar(&f.sh.netsets, "netsets", 500, "network sets (one in five global)")
	fs.IntVar(&f.sh.real, "real", 3, "real routed nodes (own network namespace, pods with veths)")
	fs.IntVar(&f.sh.realPods, "real-pods", 10, "pods per real node, through the CNI plugin")
	// 0.03: a 6-minute churn at the 45-50 creations a second two shared
	// cores reach gives about 500 tracked pods, enough for a p99.
	fs.Float64Var(&f.sh.track, "track", 0.03, "share of the simulated pods labelled for the latency measurement")
	fs.IntVar(&f.sh.blockBits, "block-size", 26, "the pool's block size (prefix length)")
	// One watch per simulated node (-1) is what the issue asks for, but
	// measured here each costs etcd and the harness about 1 MiB/s at 130
	// pod operations a second, and the harness reads at most about
	// 200 MiB/s on two cores: past that etcd buffers (1.4 GiB with 197
	// watches) and the churn slows. See docs/benchmarks.md.
	fs.IntVar(&f.watchers, "watchers", 100, "whole-prefix watches on etcd standing for the simulated nodes' (-1: one per simulated node)")
	fs.IntVar(&f.watchConns, "watch-conns", 50, "gRPC connections the watches are spread over")
	fs.IntVar(&f.workers, "workers", 32, "parallel writers while loading the datastore")
	fs.IntVar(&f.inFlight, "in-flight", 256, "pod operations under way at most during the churn (past it the schedule slips: see 'late')")
	fs.DurationVar(&f.idle, "idle", 30*time.Second, "idle measurement window")
	fs.DurationVar(&f.churn, "churn", 10*time.Minute, "how long the cluster-wide churn runs")
	fs.Float64Var(&f.creates, "creates", 100, "pod creations a second, on random simulated nodes")
	fs.Float64Var(&f.deletes, "deletes", 100, "pod deletions a second")
	fs.DurationVar(&f.policyEvery, "policy-edit-every", time.Second, "period of policy edits (0: none)")
	fs.DurationVar(&f.labelEvery, "label-edit-every", time.Second, "period of pod label changes (0: none)")
	fs.DurationVar(&f.compactEvery, "compact-every", 5*time.Minute, "compact etcd's history older than this, as kube-apiserver does its etcd (0: never)")
	fs.DurationVar(&f.readyTimeout, "ready-timeout", 10*time.Minute, "how long a real node may take to be ready")
	fs.BoolVar(&f.restart, "restart", true, "restart one real node halfway through the churn")
	fs.BoolVar(&f.restartWithoutCache, "restart-without-cache", true, "with -restart: restart the node twice, at a third of the churn from its feed cache (routed's default) and at two thirds with --feed-cache none (a full list), to compare")
	fs.IntVar(&f.listProbe, "list-probe", 0, "15 s into the churn, read every endpoint from etcd as a node's list does, one range at a time and this many at a time, alternated twice (0: no probe; its reads load etcd in a window the latency figures count)")
	fs.StringVar(&f.clusterGC, "cluster-gc", "process", "who runs the cluster-wide GC pass: process (routed cluster-gc beside the nodes, which run with --cluster-gc=false, as deploy/base does) or nodes (the real nodes elect one among them)")
	fs.StringVar(&f.heapProfiles, "heap-profiles", "", "write each real node's Go heap profile (inuse and alloc) and MemStats at the end of the idle window and right after the churn into this directory")
	var seed int64
	fs.Int64Var(&seed, "seed", 1, "seed of the generated cluster and churn")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	f.seed = uint64(seed)
	if f.heapProfiles != "" {
		abs, err := filepath.Abs(f.heapProfiles)
		if err != nil {
			return nil, fmt.Errorf("-heap-profiles: %w", err)
		}
		f.heapProfiles = abs
	}
	sh := &f.sh
	switch {
	case f.clusterGC != "process" && f.clusterGC != "nodes":
		return nil, fmt.Errorf("-cluster-gc %q: process or nodes", f.clusterGC)
	case sh.real < 1:
		return nil, fmt.Errorf("-real: at least 1")
	case sh.nodes <= sh.real || sh.nodes-sh.real > 32000:
		return nil, fmt.Errorf("-nodes: more than -real and at most 32,000 simulated")
	case sh.pods < sh.real*sh.realPods:
		return nil, fmt.Errorf("-pods: fewer than the real nodes' pods")
	case sh.namespaces < 1:
		return nil, fmt.Errorf("-namespaces: at least 1")
	case sh.policies < sh.localPolicies+1:
		return nil, fmt.Errorf("-policies: at least -local-policies + 1 (the tracking policy)")
	case sh.blockBits < 20 || sh.blockBits > 30:
		return nil, fmt.Errorf("-block-size: 20 to 30")
	}
	if f.watchers < 0 {
		f.watchers = sh.simNodes()
	}
	pool, err := sh.pickPool()
	if err != nil {
		return nil, err
	}
	sh.pool = pool
	return f, nil
}

func (s *shape) simNodes() int { return s.nodes - s.real }

func (s *shape) simPods() int { return s.pods - s.real*s.realPods }

// podsOn is how many of the simulated pods simulated node i starts with.
func (s *shape) podsOn(i int) int {
	n := s.simPods() / s.simNodes()
	if i < s.simPods()%s.simNodes() {
		n++
	}
	return n
}

// simNodeAddr is simulated node i's address: in 10.99.128.0/17, beside
// the real nodes' 10.99.1.0/24, behind the lab's router, where no one
// answers.
func (s *shape) simNodeAddr(i int) netip.Prefix {
	return netip.PrefixFrom(addrAt(netip.MustParsePrefix("10.99.128.0/17"), i+1), 17)
}

// policyMix splits -policies: the real pods' own (local and tracking),
// then GlobalNetworkPolicies and NetworkPolicies of simulated namespaces.
func (s *shape) policyMix() (gnps, nps int) {
	rest := s.policies - s.localPolicies - 1
	gnps = int(float64(rest)*s.gnpShare + 0.5)
	return gnps, rest - gnps
}

// pickPool is the smallest pool from 10.128.0.0 (at most a /9) with
// twice the blocks the start needs, for churn to claim more.
func (s *shape) pickPool() (netip.Prefix, error) {
	bsize := 1 << (32 - s.blockBits)
	need := s.real
	for i := 0; i < s.simNodes(); i++ {
		need += (s.podsOn(i) + bsize - 1) / bsize
	}
	for bits := s.blockBits - 1; bits >= 9; bits-- {
		if 1<<(s.blockBits-bits) >= 2*need {
			return netip.PrefixFrom(netip.MustParsePrefix("10.128.0.0/9").Addr(), bits), nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("%d blocks of /%d do not fit twice in 10.128.0.0/9; raise -block-size's addresses (a smaller prefix length)", need, s.blockBits)
}
