package daemon

import (
	"net"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestHealthAndMetricsDefaultToLoopback: with no flag or environment,
// health and metrics listen on 127.0.0.1 (they were on every interface of
// a hostNetwork pod, unauthenticated).
func TestHealthAndMetricsDefaultToLoopback(t *testing.T) {
	t.Setenv("ROUTED_HEALTH_LISTEN", "")
	t.Setenv("ROUTED_METRICS_LISTEN", "")
	var c Config
	fs := pflag.NewFlagSet("routed", pflag.ContinueOnError)
	c.BindFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	for name, addr := range map[string]string{"health": c.HealthAddr, "metrics": c.MetricsAddr} {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("%s address %q: %v", name, addr, err)
		}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			t.Errorf("%s listens on %q by default, want a loopback address", name, addr)
		}
	}
}

// TestBadEnvironmentValueIsAStartError: a value that is not a boolean or
// a number is refused at start, naming the variable (it used to be read
// silently as the default: ROUTED_NO_DEFAULT_IPPOOLS=yes meant false).
func TestBadEnvironmentValueIsAStartError(t *testing.T) {
	for _, tc := range []struct{ name, value, want string }{
		{"ROUTED_NO_DEFAULT_IPPOOLS", "yes", "ROUTED_NO_DEFAULT_IPPOOLS=\"yes\": want true or false"},
		{"CALICO_IPV4POOL_BLOCK_SIZE", "26x", "CALICO_IPV4POOL_BLOCK_SIZE=\"26x\": want a whole number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.name, tc.value)
			c := Config{}
			fs := pflag.NewFlagSet("routed", pflag.ContinueOnError)
			c.BindFlags(fs)
			if err := fs.Parse([]string{"--nodename", "n1"}); err != nil {
				t.Fatal(err)
			}
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	t.Setenv("ROUTED_NO_DEFAULT_IPPOOLS", "true")
	c := Config{}
	fs := pflag.NewFlagSet("routed", pflag.ContinueOnError)
	c.BindFlags(fs)
	if err := fs.Parse([]string{"--nodename", "n1"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil || !c.Pool.Disabled {
		t.Fatalf("ROUTED_NO_DEFAULT_IPPOOLS=true: Validate %v, Disabled %v", err, c.Pool.Disabled)
	}
}
