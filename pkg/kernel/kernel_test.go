package kernel

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
)

func TestHostDeviceName(t *testing.T) {
	sum := func(s string) string { b := sha1.Sum([]byte(s)); return hex.EncodeToString(b[:]) }
	if got, want := HostDeviceName("default", "nginx", "cid"), "cali"+sum("default.nginx")[:11]; got != want {
		t.Errorf("pod name: got %q, want %q", got, want)
	}
	if got, want := HostDeviceName("", "", "cid"), "cali"+sum("cid")[:11]; got != want {
		t.Errorf("container ID: got %q, want %q", got, want)
	}
}

// Every name the plugin can produce passes the rule the API and felix
// apply: a pod the plugin wires is always routed.
func TestHostDeviceNameAlwaysValid(t *testing.T) {
	for i := 0; i < 5000; i++ {
		n := HostDeviceName(fmt.Sprintf("ns-%d", i%7), fmt.Sprintf("pod/%d:\t x", i), fmt.Sprint(i))
		if len(n) != MaxDeviceNameLen {
			t.Fatalf("%q: length %d, want %d", n, len(n), MaxDeviceNameLen)
		}
		if err := CheckHostDeviceName(n); err != nil {
			t.Fatalf("plugin-made name refused: %v", err)
		}
	}
}

func TestCheckHostDeviceName(t *testing.T) {
	for _, n := range []string{"cali1", "cali0123456789a", "caliX", "cali-a.b_c~", "cali!#$&'()*+,"} {
		if err := CheckHostDeviceName(n); err != nil {
			t.Errorf("%q: %v, want accepted", n, err)
		}
	}
	for n, why := range map[string]string{
		"":                 "does not start",
		"eth0":             "does not start",
		"lo":               "does not start",
		"Cali1":            "does not start",
		"cali":             "nothing after",
		"cali0123456789ab": "longer",
		"cali/../eth0":     "'/'",
		"cali:1":           "':'",
		"cali%d":           "'%'",
		"cali 1":           "' '",
		"cali\t":           `'\t'`,
		"cali\n":           `'\n'`,
		"cali\v":           `'\v'`,
		"cali\r":           `'\r'`,
		"cali\x00":         `'\x00'`,
		"cali\x7f":         `'\x7f'`,
		"cali\u00a0":       `'Â'`,
	} {
		err := CheckHostDeviceName(n)
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: %v, want an error saying %s", n, err, why)
		}
	}
}

func TestHostDeviceSysctls(t *testing.T) {
	v4 := HostDeviceSysctls("cali1", false)
	v6 := HostDeviceSysctls("cali1", true)
	if len(v4) != 3 || len(v6) != 6 {
		t.Fatalf("got %d IPv4-only and %d dual-stack settings, want 3 and 6", len(v4), len(v6))
	}
	want := map[string]string{
		"net/ipv4/conf/cali1/proxy_arp":    "1",
		"net/ipv4/neigh/cali1/proxy_delay": "0",
		"net/ipv4/conf/cali1/forwarding":   "1",
		"net/ipv6/conf/cali1/proxy_ndp":    "1",
		"net/ipv6/conf/cali1/forwarding":   "1",
		"net/ipv6/conf/cali1/accept_ra":    "0",
	}
	for _, s := range v6 {
		if want[s.Path] != s.Value {
			t.Errorf("%s=%s, want %q", s.Path, s.Value, want[s.Path])
		}
		delete(want, s.Path)
	}
	if len(want) != 0 {
		t.Errorf("missing: %v", want)
	}
	for _, s := range HostDeviceCreateSysctls6("cali1") {
		if !strings.HasPrefix(s.Path, "net/ipv6/conf/cali1/") {
			t.Errorf("create-time setting %s is not the device's", s.Path)
		}
	}
}

func TestPoolNodeSelector(t *testing.T) {
	rack := map[string]string{"rack": "a"}
	for _, c := range []struct {
		expr   string
		labels map[string]string
		want   bool
	}{
		{"", nil, true},
		{"all()", nil, true},
		{"rack == 'a'", rack, true},
		{"rack == 'a'", nil, false},
		{"rack != 'b'", nil, true},
		{"!all()", rack, false},
	} {
		got, err := PoolSelectsNode(c.expr, c.labels)
		if err != nil || got != c.want {
			t.Errorf("%q on %v: %v, %v; want %v", c.expr, c.labels, got, err, c.want)
		}
	}
	if _, err := PoolSelectsNode("rack ==", rack); err == nil {
		t.Error("a bad selector parsed")
	}
	if (PoolNodeSelector{}).SelectsNode(rack) {
		t.Error("the zero PoolNodeSelector selected a node")
	}
}
