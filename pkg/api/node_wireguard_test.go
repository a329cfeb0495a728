package api

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestNodeWireguardKeys: the published keys are Calico's status fields,
// validated as WireGuard keys naming the field; a Node without them
// writes no status.
func TestNodeWireguardKeys(t *testing.T) {
	n := &Node{Metadata: ObjectMeta{Name: "n1"}}
	b, err := json.Marshal(n)
	if err != nil || strings.Contains(string(b), "status") {
		t.Fatalf("a Node without keys: %s (%v)", b, err)
	}
	n.Status.WireguardPublicKey = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg="
	if err := n.Validate(); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(n)
	if !strings.Contains(string(b), `"status":{"wireguardPublicKey":"xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg="}`) {
		t.Errorf("encoded: %s", b)
	}
	n.Status.WireguardPublicKeyV6 = "c2hvcnQ="
	if err := n.Validate(); err == nil || !strings.Contains(err.Error(), "status.wireguardPublicKeyV6") {
		t.Errorf("a short key: %v", err)
	}
}
