package policy_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/flowlog"
	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/felix/policy/nftdp"
)

// TestEncapFromStrangerLogged: with drop logging on, UDP to the VXLAN
// port from a host that is no node's is dropped before the node could
// unwrap it, and the policy log names the drop (encap-src/not-node, its
// kind, the stranger's address and the port), as the Manager's counter
// does; the same datagram from an address Manager.SetEncapSources was
// given passes the check (it reaches a listener on the node).
func TestEncapFromStrangerLogged(t *testing.T) {
	l := newLabWithLog(t, true)
	logs := l.logRecords(t)
	stranger := l.node.AddPeer(t, "esl0", 81)
	member := l.node.AddPeer(t, "esl1", 82)
	l.m.SetWorkloadEncapPorts([]uint16{4789})
	if !l.m.SetEncapSources([]netip.Prefix{netip.PrefixFrom(member.IPv4, 32)}) {
		t.Fatal("SetEncapSources reported no change")
	}
	l.apply()
	sink := polab.NewUDPSink(t, l.node.NS, 4789)
	polab.SendUDP(t, stranger.NS, stranger.IPv4, 40001, netip.AddrPortFrom(stranger.NodeIPv4, 4789), "from a stranger")
	r := waitRecord(t, logs, "the stranger's VXLAN datagram", func(r flowlog.Record) bool {
		return r.Verdict == "drop" && r.DstPort == 4789
	})
	if r.Kind != policy.KindEncapNotNode || r.RuleID != nftdp.EncapSrcDropID || r.Src != stranger.IPv4.String() || r.Proto != "UDP" {
		t.Errorf("drop record: %+v", r)
	}
	cs, err := l.m.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if cs[nftdp.EncapSrcDropID].Packets == 0 {
		t.Errorf("counter %s is 0", nftdp.EncapSrcDropID)
	}
	nstest.Eventually(t, 10*time.Second, func() string {
		if _, ok := sink.Has("from a node"); ok {
			return ""
		}
		polab.SendUDP(t, member.NS, member.IPv4, 40001, netip.AddrPortFrom(member.NodeIPv4, 4789), "from a node")
		return "the node's datagram never reached the node's listener"
	})
	if _, ok := sink.Has("from a stranger"); ok {
		t.Error("the stranger's datagram reached the node's listener")
	}
}
