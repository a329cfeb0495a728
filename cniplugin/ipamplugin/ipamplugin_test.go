package ipamplugin

import (
	"errors"
	"fmt"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/routed-net/routed/cniplugin/plugin"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

func TestRequestedIP(t *testing.T) {
	c := &call{conf: &netConf{}}
	if ip, err := c.requestedIP(); err != nil || ip.IsValid() {
		t.Fatalf("none: %v %v", ip, err)
	}
	c.conf.RuntimeConfig.IPs = []string{"10.0.0.7/24"}
	if ip, err := c.requestedIP(); err != nil || ip.String() != "10.0.0.7" {
		t.Fatalf("runtimeConfig: %v %v", ip, err)
	}
	c.conf.RuntimeConfig.IPs = nil
	c.k8s = plugin.K8sArgs{RequestedIP: []string{"10.0.0.8"}}
	if ip, err := c.requestedIP(); err != nil || ip.String() != "10.0.0.8" {
		t.Fatalf("CNI_ARGS: %v %v", ip, err)
	}
	c.k8s.RequestedIP = []string{"10.0.0.8", "10.0.0.9"}
	if _, err := c.requestedIP(); !errors.Is(err, errConfig) {
		t.Fatalf("two IPs: %v", err)
	}
	c.k8s.RequestedIP = []string{"fd00::1"}
	if _, err := c.requestedIP(); !errors.Is(err, errConfig) {
		t.Fatalf("IPv6: %v", err)
	}
}

func TestCodes(t *testing.T) {
	for err, want := range map[error]uint{
		ipam.ErrExhausted:        types.ErrInternal,
		ipam.ErrNoPool:           types.ErrInvalidNetworkConfig,
		ipam.ErrContention:       types.ErrTryAgainLater,
		datastore.ErrUnavailable: types.ErrTryAgainLater,
		errConfig:                types.ErrInvalidNetworkConfig,
	} {
		if got := codeOf(fmt.Errorf("ctx: %w", err)); got != want {
			t.Errorf("%v: %d, want %d", err, got, want)
		}
	}
}
