package api

import (
	"strings"
	"testing"
)

// TestNodeWireguardAddresses: a Calico Node's spec.wireguard device
// addresses are carried by the import, without a warning (they were
// dropped with one before routed allocated them), and a wrong family is
// refused naming the field.
func TestNodeWireguardAddresses(t *testing.T) {
	doc := "apiVersion: projectcalico.org/v3\nkind: Node\nmetadata: {name: n1}\nspec:\n  bgp: {ipv4Address: 10.0.0.11/24}\n" +
		"  wireguard: {interfaceIPv4Address: 10.9.0.3, interfaceIPv6Address: 'fd00:9::3'}\n"
	d, err := Decode([]byte(doc))
	if err != nil || len(d.Warnings) != 0 {
		t.Fatalf("%v %v", d, err)
	}
	n := d.Resources[0].(*Node)
	if err := n.Validate(); err != nil {
		t.Fatal(err)
	}
	if a, ok := n.WireguardAddress(false); !ok || a.String() != "10.9.0.3" {
		t.Errorf("IPv4 device address %v %v", a, ok)
	}
	if a, ok := n.WireguardAddress(true); !ok || a.String() != "fd00:9::3" {
		t.Errorf("IPv6 device address %v %v", a, ok)
	}
	n.Spec.Wireguard.InterfaceIPv4Address = "fd00:9::4"
	if err := n.Validate(); err == nil || !strings.Contains(err.Error(), "spec.wireguard.interfaceIPv4Address") {
		t.Errorf("an IPv6 address as the IPv4 device's: %v", err)
	}
	if _, ok := n.WireguardAddress(false); ok {
		t.Error("an IPv6 address read as the IPv4 device's")
	}
}
