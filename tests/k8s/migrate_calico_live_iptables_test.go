package k8s_test

import (
	"testing"
	"time"

	"github.com/routed-net/routed/tests/lab"
)

// TestMigrateCalicoKDDLiveNodeByNodeIptables is
// TestMigrateCalicoKDDLiveNodeByNode with Calico's felix in iptables
// mode, Calico's default (felixIptables: the nft backend, which felix
// picks from the kubelet's chains). Each node's felix, stopped, leaves
// its chains and rules, which keep enforcing (the denied flows stay
// denied) until routed is Ready; then docs/migrate-calico.md step 6.2's
// clean-up removes its chains, its jumps from the built-in chains and
// its ipsets, and leaves the kubelet's chains and routed's nftables
// tables as they were (clearIptables).
func TestMigrateCalicoKDDLiveNodeByNodeIptables(t *testing.T) {
	liveSwitch(t, newKDDLive, (*lab.CalicoBird).Kill, time.Second, felixIptables)
}
