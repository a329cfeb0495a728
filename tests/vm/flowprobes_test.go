package vm

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
)

// flowTests are felix/policy/flowrec's tests that need the VM's kernel:
// one whose fexit programs this host's kernel refuses (the kernel
// conntrack source), and the collector's lab tests, which take that
// source there (the host's runs fall back to ctnetlink's events).
var flowTests = []string{"TestConntrackProbesInVM", "TestFlowVerdicts", "TestCollectorFallsBackToEvents", "TestCollectorSourceRefused",
	"TestPollSourceMatchesEvents", "TestPollSourceRestart"}

// TestFlowProbesInVM builds flowrec's tests as a static binary and runs
// flowTests in a VM with the modules the policy dataplane and flow
// records use.
func TestFlowProbesInVM(t *testing.T) {
	testenv.RequireRoot(t, "apt-get, network namespaces")
	bench := os.Getenv("ROUTED_VM_FLOW_BENCH")
	limit := 6 * time.Minute
	if bench != "" {
		limit = 20 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit+3*time.Minute)
	defer cancel()
	bin, work := buildTests(t, ctx, "./felix/policy/flowrec")
	a := chooseAccel(t, 1, limit, limit/2)
	args := []string{"-test.v", "-test.run", "^(" + strings.Join(flowTests, "|") + ")$", "-test.timeout", guestTimeout(a).String()}
	if bench != "" {
		// A benchmark of flowrec in the VM (BenchmarkEventSources), by hand.
		args = []string{"-test.v", "-test.run", "^$", "-test.bench", bench, "-test.benchtime", "1x", "-test.timeout", guestTimeout(a).String()}
	}
	mustPass := flowTests
	if bench != "" {
		mustPass = nil
	}
	// ROUTED_VM_FLOW_ENV: the benchmark's settings, NAME=value words
	// (FLOWREC_SOURCES=none,bpf,ctbatch FLOWREC_ROUNDS=6).
	bootTests(t, ctx, a, bin, work, []string{"VM_MODULES=" + flowModules, "VM_ENV=" + os.Getenv("ROUTED_VM_FLOW_ENV")}, "flowrec", mustPass, args...)
}

// flowModules are the modules of the policy dataplane (nftables with
// conntrack state, nflog, limits, rejects) and of flow records
// (ctnetlink's events, for the side-by-side check; named counters,
// which the poll source's rules refer to).
const flowModules = "nf_tables nft_ct nft_log nft_limit nft_fib_inet nft_fib_ipv4 nft_fib_ipv6 nfnetlink_log nf_conntrack_netlink nft_reject_inet nft_chain_nat nft_objref"
