package daemon

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/etcdserver/etcdtest"
	"github.com/routed-net/routed/pkg/feed"
)

func felixConf(t *testing.T, yaml string) *api.FelixConfiguration {
	t.Helper()
	d, err := api.Decode([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	fc := d.Resources[0].(*api.FelixConfiguration)
	if err := fc.Validate(); err != nil {
		t.Fatal(err)
	}
	return fc
}

// TestFelixConfigAtStart reads "default" and "node.<name>" from a real
// etcd as routed does at start: the node's fields win, another node's
// configuration is not read, and felix's Config gets the MTUs, the
// resync interval and the failsafe ports (an empty list: none).
func TestFelixConfigAtStart(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	ds, err := datastore.New(datastore.Config{Endpoints: srv.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ds.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	spec, err := readFelixConfig(ds, "n1", false)
	if err != nil || !reflect.DeepEqual(spec, api.FelixConfigurationSpec{}) {
		t.Fatalf("no FelixConfiguration: %+v %v", spec, err)
	}
	for _, y := range []string{
		"apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: default}\nspec: {ipipMTU: 1400, vxlanMTU: 1400, routeRefreshInterval: 30s, failsafeInboundHostPorts: [{protocol: TCP, port: 22}, {protocol: UDP, port: 68}]}\n",
		"apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: node.n1}\nspec: {ipipMTU: 1350, vxlanVNI: 5000, failsafeOutboundHostPorts: []}\n",
		"apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: node.n2}\nspec: {vxlanMTU: 1200}\n",
	} {
		if _, err := ds.Apply(ctx, felixConf(t, y)); err != nil {
			t.Fatal(err)
		}
	}
	spec, err = readFelixConfig(ds, "n1", false)
	if err != nil {
		t.Fatal(err)
	}
	fc := withFelixConfig(felix.Config{ResyncInterval: time.Minute}, spec)
	if fc.IPIPMTU != 1350 || fc.VXLANMTU != 1400 || fc.VXLANMTUV6 != 0 || fc.VXLANVNI != 5000 || fc.VXLANPort != 0 || fc.ResyncInterval != 30*time.Second {
		t.Errorf("felix config %+v", fc)
	}
	if want := []policy.HostPort{{Proto: 6, Port: 22}, {Proto: 17, Port: 68}}; !reflect.DeepEqual(fc.FailsafeInboundHostPorts, want) {
		t.Errorf("failsafe inbound %v, want %v", fc.FailsafeInboundHostPorts, want)
	}
	if fc.FailsafeOutboundHostPorts == nil || len(fc.FailsafeOutboundHostPorts) != 0 {
		t.Errorf("failsafe outbound %#v, want an empty list (none), not nil (Calico's defaults)", fc.FailsafeOutboundHostPorts)
	}
	if _, err := felix.New(withFelixConfig(felix.Config{NodeName: "n1"}, spec)); err != nil {
		t.Errorf("felix refuses the configuration: %v", err)
	}
	// A datastore the node does not trust is not read.
	if spec, err := readFelixConfig(ds, "n1", true); err != nil || spec.IPIPMTU != nil {
		t.Errorf("held: %+v %v", spec, err)
	}
}

// TestFelixConfigLogLevelLive: logSeverityScreen follows the feed, the
// node's over the default's, and --log-level comes back when neither
// sets it.
func TestFelixConfigLogLevelLive(t *testing.T) {
	was := logrus.GetLevel()
	t.Cleanup(func() { logrus.SetLevel(was) })
	logrus.SetLevel(logrus.InfoLevel)
	c := newFelixConfig("n1", logrus.InfoLevel, nil, api.FelixConfigurationSpec{})
	global := felixConf(t, "apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: default}\nspec: {logSeverityScreen: Debug}\n")
	own := felixConf(t, "apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: node.n1}\nspec: {logSeverityScreen: warning}\n")
	steps := []struct {
		b    feed.Batch
		want logrus.Level
	}{
		{feed.Batch{Snapshot: true, Updates: []feed.Update{{Kind: api.KindFelixConfiguration, Name: "default", Resource: global}}}, logrus.DebugLevel},
		{feed.Batch{Updates: []feed.Update{{Kind: api.KindFelixConfiguration, Name: "node.n1", Resource: own}}}, logrus.WarnLevel},
		{feed.Batch{Updates: []feed.Update{{Kind: api.KindFelixConfiguration, Name: "node.n1", Deleted: true}}}, logrus.DebugLevel},
		{feed.Batch{Snapshot: true}, logrus.InfoLevel},
	}
	for i, s := range steps {
		c.OnBatch(s.b)
		if got := logrus.GetLevel(); got != s.want {
			t.Errorf("step %d: level %s, want %s", i, got, s.want)
		}
	}
}

// TestFelixConfigThroughTheFeed runs the real node feed on a real etcd:
// the consumer sees "default" and its own node's configuration as they
// are applied and deleted, and never another node's.
func TestFelixConfigThroughTheFeed(t *testing.T) {
	was := logrus.GetLevel()
	t.Cleanup(func() { logrus.SetLevel(was) })
	srv := etcdtest.Start(t)
	ds, err := datastore.New(datastore.Config{Endpoints: srv.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ds.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	seen := make(chan api.FelixConfigurationSpec, 100)
	c := newFelixConfig("n1", logrus.InfoLevel, nil, api.FelixConfigurationSpec{})
	c.applied = func(s api.FelixConfigurationSpec) { seen <- s }
	fd := feed.New(ds, feed.Options{})
	fd.Subscribe("felix configuration", []api.Kind{api.KindFelixConfiguration}, c, felixConfigNames("n1"))
	fctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- fd.Run(fctx) }()
	t.Cleanup(func() { stop(); <-done })

	waitFor := func(what string, ok func(api.FelixConfigurationSpec) bool) {
		t.Helper()
		for {
			select {
			case s := <-seen:
				if s.IPIPMTU != nil && *s.IPIPMTU == 1000 {
					t.Fatalf("node.n2's configuration reached n1: %+v", s)
				}
				if ok(s) {
					return
				}
			case <-ctx.Done():
				t.Fatalf("never saw %s", what)
			}
		}
	}
	waitFor("the first snapshot", func(api.FelixConfigurationSpec) bool { return true })
	for _, y := range []string{
		"apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: node.n2}\nspec: {ipipMTU: 1000}\n",
		"apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: default}\nspec: {vxlanMTU: 1400, logSeverityScreen: Debug}\n",
		"apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: node.n1}\nspec: {ipipMTU: 1300}\n",
	} {
		if _, err := ds.Apply(ctx, felixConf(t, y)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor("default and node.n1", func(s api.FelixConfigurationSpec) bool {
		return s.IPIPMTU != nil && *s.IPIPMTU == 1300 && s.VXLANMTU != nil && *s.VXLANMTU == 1400
	})
	if logrus.GetLevel() != logrus.DebugLevel {
		t.Errorf("log level %s, want debug", logrus.GetLevel())
	}
	if err := ds.Delete(ctx, api.KindFelixConfiguration, "node.n1", ""); err != nil {
		t.Fatal(err)
	}
	waitFor("node.n1 deleted", func(s api.FelixConfigurationSpec) bool { return s.IPIPMTU == nil && s.VXLANMTU != nil })
}
