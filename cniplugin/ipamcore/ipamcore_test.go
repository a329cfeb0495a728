//go:build !cnithin

package ipamcore

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

func TestRequestedIPs(t *testing.T) {
	if ips, err := requestedIPs(nil, nil); err != nil || len(ips) != 0 {
		t.Fatalf("none: %v %v", ips, err)
	}
	if ips, err := requestedIPs([]string{"10.0.0.7/24"}, []string{"10.0.0.8"}); err != nil || ips[4].String() != "10.0.0.7" || len(ips) != 1 {
		t.Fatalf("runtimeConfig wins: %v %v", ips, err)
	}
	if ips, err := requestedIPs(nil, []string{"10.0.0.8"}); err != nil || ips[4].String() != "10.0.0.8" {
		t.Fatalf("CNI_ARGS: %v %v", ips, err)
	}
	if ips, err := requestedIPs([]string{"10.0.0.8", "fd00::8/64"}, nil); err != nil || ips[4].String() != "10.0.0.8" || ips[6].String() != "fd00::8" {
		t.Fatalf("one per family: %v %v", ips, err)
	}
	for _, bad := range [][]string{{"10.0.0.8", "10.0.0.9"}, {"fd00::1", "fd00::2"}, {"::ffff:10.0.0.1"}, {"fe80::1%eth0"}, {"x"}} {
		if _, err := requestedIPs(nil, bad); !errors.Is(err, ErrConfig) {
			t.Errorf("%v: %v", bad, err)
		}
	}
}

func TestCodes(t *testing.T) {
	for err, want := range map[error]uint{
		ipam.ErrExhausted:        types.ErrInternal,
		ipam.ErrNoPool:           types.ErrInvalidNetworkConfig,
		ipam.ErrContention:       types.ErrTryAgainLater,
		datastore.ErrUnavailable: types.ErrTryAgainLater,
		ErrConfig:                types.ErrInvalidNetworkConfig,
		types.NewError(types.ErrPluginNotAvailable, "x", ""): types.ErrPluginNotAvailable,
	} {
		if got := CodeOf(fmt.Errorf("ctx: %w", err)); got != want {
			t.Errorf("%v: %d, want %d", err, got, want)
		}
	}
	var te *types.Error
	if err := CNIError(fmt.Errorf("assign: %w", ipam.ErrNoPool)); !errors.As(err, &te) || te.Code != types.ErrInvalidNetworkConfig || te.Msg != "assign: "+ipam.ErrNoPool.Error() {
		t.Errorf("CNIError: %#v", err)
	}
	if CNIError(nil) != nil {
		t.Error("CNIError(nil) is not nil")
	}
}

func TestParseConf(t *testing.T) {
	c, err := ParseConf([]byte(`{"name":"n","ipam":{"type":"routed-ipam","ipv4_pools":["a","10.0.0.0/8"],"gc_grace_seconds":-1}}`))
	if err != nil || len(c.IPv4Pools) != 2 || c.GCGrace() != 0 {
		t.Fatalf("%+v %v", c, err)
	}
	if c.GCGraceSeconds = 0; c.GCGrace() != DefaultGCGrace {
		t.Errorf("default grace %v", c.GCGrace())
	}
	if c.GCGraceSeconds = 5; c.GCGrace() != 5*time.Second {
		t.Errorf("grace %v", c.GCGrace())
	}
	if c, err := ParseConf([]byte(`{"ipam":{"type":"routed-ipam","ipv6_pools":["v6"]}}`)); err != nil || c.mode(6) != familyOn || c.mode(4) != familyAuto {
		t.Errorf("ipv6_pools: %+v %v", c, err)
	}
	if c, err := ParseConf([]byte(`{"ipam":{"type":"routed-ipam","assign_ipv4":"false","assign_ipv6":"true"}}`)); err != nil || c.mode(4) != familyOff || c.mode(6) != familyOn {
		t.Errorf("IPv6 only: %+v %v", c, err)
	}
	for _, bad := range []string{
		`{"ipam":{"assign_ipv6":"yes"}}`,
		`{"ipam":{"assign_ipv4":"false","assign_ipv6":"false"}}`,
		`{"ipam":{"assign_ipv6":"false","ipv6_pools":["v6"]}}`,
		`{"ipam":{"ipv4_pools":"pool-a"}}`,
		`not json`,
	} {
		if _, err := ParseConf([]byte(bad)); !errors.Is(err, ErrConfig) || CodeOf(err) != types.ErrInvalidNetworkConfig {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
