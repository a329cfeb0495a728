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

func TestRequestedIP(t *testing.T) {
	if ip, err := requestedIP(nil, nil); err != nil || ip.IsValid() {
		t.Fatalf("none: %v %v", ip, err)
	}
	if ip, err := requestedIP([]string{"10.0.0.7/24"}, []string{"10.0.0.8"}); err != nil || ip.String() != "10.0.0.7" {
		t.Fatalf("runtimeConfig wins: %v %v", ip, err)
	}
	if ip, err := requestedIP(nil, []string{"10.0.0.8"}); err != nil || ip.String() != "10.0.0.8" {
		t.Fatalf("CNI_ARGS: %v %v", ip, err)
	}
	if _, err := requestedIP(nil, []string{"10.0.0.8", "10.0.0.9"}); !errors.Is(err, ErrConfig) {
		t.Fatalf("two IPs: %v", err)
	}
	if _, err := requestedIP(nil, []string{"fd00::1"}); !errors.Is(err, ErrConfig) {
		t.Fatalf("IPv6: %v", err)
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
	for _, bad := range []string{
		`{"ipam":{"assign_ipv6":"true"}}`,
		`{"ipam":{"ipv4_pools":"pool-a"}}`,
		`not json`,
	} {
		if _, err := ParseConf([]byte(bad)); !errors.Is(err, ErrConfig) || CodeOf(err) != types.ErrInvalidNetworkConfig {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
