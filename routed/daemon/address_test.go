package daemon

import "testing"

// TestNodeAddressFlags: --ip6 none, an address, and bad values.
func TestNodeAddressFlags(t *testing.T) {
	t.Parallel()
	cfg := Config{IP: "10.0.0.5/24", IP6: "none"}
	if a, err := nodeAddress(cfg); err != nil || a.V6.IsValid() {
		t.Fatalf("none: %+v %v", a, err)
	}
	cfg.IP6 = "fd00:10::5/64"
	if a, err := nodeAddress(cfg); err != nil || a.V6.String() != "fd00:10::5/64" {
		t.Fatalf("address: %+v %v", a, err)
	}
	for _, bad := range []string{"fd00:10::5", "10.0.0.6/24", "fe80::1/64", "x"} {
		cfg.IP6 = bad
		if _, err := nodeAddress(cfg); err == nil {
			t.Errorf("--ip6 %s: no error", bad)
		}
	}
}
