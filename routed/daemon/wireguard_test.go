package daemon

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/routed-net/routed/felix"
)

// TestWireguardFlags: off by default with clear text refused; Calico's
// FELIX_ variables turn it on; felix gets the keys' directory and the
// publisher; a bad value is a start error naming the variable; host
// encryption (flag or Calico's variable) reaches felix, which takes it.
func TestWireguardFlags(t *testing.T) {
	parse := func(args ...string) Config {
		t.Helper()
		var c Config
		fs := pflag.NewFlagSet("routed", pflag.ContinueOnError)
		c.BindFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := parse()
	if w := c.Wireguard; w.Enabled || w.EnabledV6 || w.AllowClear || w.Port != 51820 || w.PortV6 != 51821 || w.Mode != "auto" {
		t.Errorf("defaults: %+v", w)
	}
	t.Setenv("FELIX_WIREGUARDENABLED", "true")
	t.Setenv("ROUTED_WIREGUARD_MTU", "1400")
	c = parse("--wireguard-v6", "--state-dir", "/x")
	var got [2]string
	fw := c.felixWireguard(func(v4, v6 string) { got = [2]string{v4, v6} })
	fw.PublishKeys("a", "b")
	if !fw.Enabled || !fw.EnabledV6 || fw.MTU != 1400 || fw.KeyDir != "/x" || got != [2]string{"a", "b"} {
		t.Errorf("felix config %+v (published %v)", fw, got)
	}

	t.Setenv("ROUTED_WIREGUARD_ALLOW_CLEAR", "maybe")
	c = parse()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "ROUTED_WIREGUARD_ALLOW_CLEAR") {
		t.Errorf("bad boolean: %v", err)
	}
	t.Setenv("ROUTED_WIREGUARD_ALLOW_CLEAR", "")
	c = parse("--wireguard", "--wireguard-host-encryption")
	if fw := c.felixWireguard(nil); !fw.HostEncryption {
		t.Errorf("--wireguard-host-encryption: felix config %+v", fw)
	}
	if _, err := felix.New(felix.Config{NodeName: "n", WireGuard: c.felixWireguard(nil)}); err != nil {
		t.Errorf("host encryption refused: %v", err)
	}
	t.Setenv("FELIX_WIREGUARDHOSTENCRYPTIONENABLED", "true")
	if c = parse(); !c.Wireguard.HostEncryption {
		t.Error("FELIX_WIREGUARDHOSTENCRYPTIONENABLED=true: host encryption off")
	}
}
