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

// TestFelixConfigurationWireguard: Calico's wireguardEnabled and
// wireguardEnabledV6 are honoured (a node's wins over the default's);
// "true" as a string is refused, never read as false (clear text
// without a word); host encryption is honoured the same way.
func TestFelixConfigurationWireguard(t *testing.T) {
	doc := func(spec string) string {
		return "apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: default}\nspec:\n  " + spec + "\n"
	}
	d, err := Decode([]byte(doc("{wireguardEnabled: true, wireguardEnabledV6: false}")))
	if err != nil || len(d.Warnings) != 0 {
		t.Fatalf("%v %v", d, err)
	}
	fc := d.Resources[0].(*FelixConfiguration)
	off := false
	eff := EffectiveFelixConfiguration(fc, &FelixConfiguration{Spec: FelixConfigurationSpec{WireguardEnabled: &off}})
	if eff.WireguardEnabled == nil || *eff.WireguardEnabled || eff.WireguardEnabledV6 == nil || *eff.WireguardEnabledV6 {
		t.Errorf("effective: %+v", eff)
	}
	if _, err := Decode([]byte(doc(`wireguardEnabled: "true"`))); err == nil || !strings.Contains(err.Error(), "wireguardEnabled") {
		t.Errorf(`wireguardEnabled: "true": %v, want refused`, err)
	}
	d, err = Decode([]byte(doc("wireguardHostEncryptionEnabled: true")))
	if err != nil || len(d.Warnings) != 0 {
		t.Fatalf("host encryption: %v %v", d, err)
	}
	if on := d.Resources[0].(*FelixConfiguration).Spec.WireguardHostEncryptionEnabled; on == nil || !*on {
		t.Errorf("host encryption: %v, want true", on)
	}
	if _, err := Decode([]byte(doc(`wireguardHostEncryptionEnabled: "true"`))); err == nil || !strings.Contains(err.Error(), "wireguardHostEncryptionEnabled") {
		t.Errorf(`wireguardHostEncryptionEnabled: "true": %v, want refused`, err)
	}
}
