package policy_test

import (
	"os/exec"
	"regexp"
	"strconv"
	"testing"

	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/policy/internal/polab"
)

// TestEndpointToHostIsReturn: routed's verdict on a pod's traffic to its
// host is Calico's defaultEndpointToHostAction Return, not an Accept
// that overrides the host's own firewall. routed accepts in its own
// table's input base chain once the pod's egress policy allows; an
// nftables accept ends only that base chain, so a table of the host's
// own on the same hook (here after routed's, at priority 10) still sees
// the packet and its drop still drops it, as Calico's RETURN hands the
// packet back to the host's INPUT rules. The host's chain counts what
// reaches it: routed passed the port the host drops, and the pod's
// egress policy still judges first (what it denies never reaches the
// host's rules).
func TestEndpointToHostIsReturn(t *testing.T) {
	l := newLab(t)
	polab.Serve(t, l.node.NS, 7071)
	l.expect("no host firewall", append(both(pass("a", "host", "tcp", 7070)), both(pass("a", "host", "tcp", 7071))...)...)

	polab.Nft(t, l.node.NS, `
table inet hostfw {
	counter seen {}
	chain input {
		type filter hook input priority 10; policy accept;
		iifname "cali*" tcp dport 7070 counter name seen drop
	}
}`)
	t.Cleanup(func() { polab.Nft(t, l.node.NS, "delete table inet hostfw") })
	before := nftCounter(t, l.node.NS, "hostfw", "seen")
	polab.Expect(t, l.pods["a"].NS, polab.Probe{Proto: "tcp", Dst: l.ns("host").Addr(false), Port: 7070}, false, "host drops 7070")
	polab.Expect(t, l.pods["a"].NS, polab.Probe{Proto: "tcp", Dst: l.ns("host").Addr(true), Port: 7070}, false, "host drops 7070, IPv6")
	reached := nftCounter(t, l.node.NS, "hostfw", "seen")
	if reached <= before {
		t.Fatalf("the host's drop counted %d packets before the probes and %d after: routed did not pass them on to it", before, reached)
	}
	l.expect("host drops 7070 only", both(pass("a", "host", "tcp", 7071))...)

	l.load(gnp("a-no-host", "  selector: app == 'a'\n  types: [Egress]\n  egress: [{action: Allow, protocol: TCP, destination: {ports: [7071]}}]"))
	l.apply()
	l.expect("egress policy first", append(both(drop("a", "host", "tcp", 7070)), both(pass("a", "host", "tcp", 7071))...)...)
	if after := nftCounter(t, l.node.NS, "hostfw", "seen"); after != reached {
		t.Errorf("the host's drop counted %d packets while pod a's egress policy denied port 7070, want %d: routed passed what its policy denies", after, reached)
	}
}

var counterPackets = regexp.MustCompile(`packets (\d+)`)

// nftCounter is the packets of the named counter in inet table table
// of n.
func nftCounter(t *testing.T, n *nstest.NS, table, counter string) uint64 {
	t.Helper()
	out, err := exec.Command("nsenter", "--net="+n.Path(), "nft", "list", "counter", "inet", table, counter).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list counter inet %s %s: %v\n%s", table, counter, err, out)
	}
	m := counterPackets.FindSubmatch(out)
	if m == nil {
		t.Fatalf("no packet count in %s", out)
	}
	v, _ := strconv.ParseUint(string(m[1]), 10, 64)
	return v
}
