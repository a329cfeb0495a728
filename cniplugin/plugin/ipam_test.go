//go:build !cnithin

package plugin

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/routed-net/routed/pkg/datastore"
)

// notClient is a Store that is not a *datastore.Client (a test fake).
type notClient struct{ Store }

func TestIPAMForPicksBackend(t *testing.T) {
	// datastore.New does not connect, so no etcd is needed here.
	ds, err := datastore.New(datastore.Config{Endpoints: []string{"http://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	routed := testCall(t, `{"name":"n","etcd_endpoints":"http://127.0.0.1:1","ipam":{"type":"routed-ipam"}}`)
	if _, ok := ipamFor(routed, ds).(*localIPAM); !ok {
		t.Error("routed-ipam over a datastore client is not run in-process")
	}
	if _, ok := ipamFor(routed, notClient{}).(*execIPAM); !ok {
		t.Error("routed-ipam over a fake store is not executed")
	}
	hl := testCall(t, `{"name":"n","etcd_endpoints":"http://127.0.0.1:1","ipam":{"type":"host-local"}}`)
	if _, ok := ipamFor(hl, ds).(*execIPAM); !ok {
		t.Error("host-local is not executed")
	}
}

// A bad ipam section fails every in-process verb with code 7 before any
// datastore access, as the routed-ipam executable does.
func TestLocalIPAMBadConf(t *testing.T) {
	ds, err := datastore.New(datastore.Config{Endpoints: []string{"http://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	c := testCall(t, `{"name":"n","etcd_endpoints":"http://127.0.0.1:1","ipam":{"type":"routed-ipam","assign_ipv6":"yes"}}`)
	l := ipamFor(c, ds)
	ctx := context.Background()
	_, addErr := l.add(ctx)
	release, _ := l.staleReleaser()
	for name, err := range map[string]error{
		"add": addErr, "del": l.del(ctx), "check": l.check(ctx, nil), "gc": l.gc(ctx), "status": l.status(ctx),
		"release": release(ctx, "c2", "eth0"),
	} {
		var te *types.Error
		if !errors.As(err, &te) || te.Code != types.ErrInvalidNetworkConfig || !strings.HasPrefix(te.Msg, `routed-ipam: invalid configuration: assign_ipv6 is "yes"; want "true" or "false"`) {
			t.Errorf("%s: %#v", name, err)
		}
	}
}
