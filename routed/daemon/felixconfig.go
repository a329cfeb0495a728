package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/feed"
)

// FelixConfiguration: routed honours the fields of
// api.FelixConfigurationSpec from "default" and "node.<name>" (the
// node's win, field by field).
//
//   - Live, from the node feed (felixConfig): logSeverityScreen (routed's
//     log level; unset: --log-level again), ipipMTU, vxlanMTU and
//     vxlanMTUV6 (felix.ApplySettings: the devices and the pod MTU file
//     follow at once; pods created before keep their MTU), vxlanVNI and
//     vxlanPort (the VXLAN devices are recreated), externalNodesList
//     (felix.SetExternalNodes; also given at start, before felix runs).
//   - At start only (readFelixConfig, before felix is built):
//     routeRefreshInterval (felix's ResyncInterval) and
//     failsafeInboundHostPorts/failsafeOutboundHostPorts (felix's
//     failsafe ports: unset is Calico's defaults, an empty list none).
//     A change while routed runs is logged as taking effect at the next
//     start.

// felixConfigTimeout bounds the start-up read of FelixConfiguration.
const felixConfigTimeout = 30 * time.Second

// readFelixConfig reads the effective FelixConfiguration for node at
// start, retrying an unreachable datastore for felixConfigTimeout (then
// routed does not start: felix must not start with failsafe ports the
// operator closed). A datastore the node does not trust (held) is not
// read: felix starts with its defaults and the feed brings the rest
// once trusted.
func readFelixConfig(ds *datastore.Client, node string, held bool) (api.FelixConfigurationSpec, error) {
	if held {
		return api.FelixConfigurationSpec{}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), felixConfigTimeout)
	defer cancel()
	var got [2]*api.FelixConfiguration
	for i, name := range []string{"default", api.FelixConfigurationNodePrefix + node} {
		var r api.Resource
		err := retry(ctx, "read FelixConfiguration "+name, func() error {
			var err error
			r, err = ds.Get(ctx, api.KindFelixConfiguration, name)
			if datastore.IsNotFound(err) {
				return nil
			}
			return err
		})
		if err != nil {
			return api.FelixConfigurationSpec{}, err
		}
		if r == nil {
			continue
		}
		fc, ok := r.(*api.FelixConfiguration)
		if !ok {
			return api.FelixConfigurationSpec{}, fmt.Errorf("reading FelixConfiguration %s: got a %s", name, r.GetKind())
		}
		got[i] = fc
	}
	return api.EffectiveFelixConfiguration(got[0], got[1]), nil
}

// felixSettings are the live fields of s for felix.
func felixSettings(s api.FelixConfigurationSpec) felix.Settings {
	return felix.Settings{IPIPMTU: deref(s.IPIPMTU), VXLANMTU: deref(s.VXLANMTU), VXLANMTUV6: deref(s.VXLANMTUV6),
		VXLANVNI: deref(s.VXLANVNI), VXLANPort: deref(s.VXLANPort)}
}

// externalNodes parses externalNodesList for felix. A bad entry (one
// stored past validation, e.g. written straight to the datastore) is
// logged as an error naming it, and then no external source is
// admitted: never a list applied without the entry the operator meant.
// Entries that admit more than they seem (host bits set, a /0) are
// warned about, naming them (api.ExternalNodeWarnings). Each distinct
// list is logged about once, not on every FelixConfiguration event.
func externalNodes(s api.FelixConfigurationSpec) []netip.Prefix {
	return externalNodesOnce.parse(log, s)
}

// externalNodesOnce remembers the externalNodesList last logged about
// (the daemon parses it at start and on every FelixConfiguration event).
var externalNodesOnce externalNodesParser

// externalNodesParser parses externalNodesList, logging about each
// distinct list once. The zero value is ready.
type externalNodesParser struct {
	mu   sync.Mutex
	last []string
	seen bool
}

// parse is externalNodes, logging to lg.
func (o *externalNodesParser) parse(lg *logrus.Entry, s api.FelixConfigurationSpec) []netip.Prefix {
	nets, err := api.ExternalNodeNets(s.ExternalNodesCIDRList)
	say := o.changed(s.ExternalNodesCIDRList)
	if err != nil {
		if say {
			lg.WithError(err).Error("externalNodesList refused: no external source may send this node IPIP or VXLAN packets until it is fixed")
		}
		return nil
	}
	if say {
		for _, w := range api.ExternalNodeWarnings(s.ExternalNodesCIDRList) {
			lg.WithField("field", "externalNodesList").Warn(w)
		}
	}
	return nets
}

// changed reports whether list differs from the last one given (true
// the first time), and remembers it.
func (o *externalNodesParser) changed(list *[]string) bool {
	var l []string
	if list != nil {
		l = *list
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen && slices.Equal(o.last, l) {
		return false
	}
	o.last, o.seen = slices.Clone(l), true
	return true
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// withFelixConfig sets in fc what FelixConfiguration gives felix at
// start: the tunnel MTUs and, when set, the resync interval and the
// failsafe ports.
func withFelixConfig(fc felix.Config, s api.FelixConfigurationSpec) felix.Config {
	st := felixSettings(s)
	fc.IPIPMTU, fc.VXLANMTU, fc.VXLANMTUV6 = st.IPIPMTU, st.VXLANMTU, st.VXLANMTUV6
	fc.VXLANVNI, fc.VXLANPort = st.VXLANVNI, st.VXLANPort
	if d, err := time.ParseDuration(s.RouteRefreshInterval); err == nil && d > 0 {
		fc.ResyncInterval = d
	}
	fc.FailsafeInboundHostPorts = hostPorts(s.FailsafeInboundHostPorts, fc.FailsafeInboundHostPorts)
	fc.FailsafeOutboundHostPorts = hostPorts(s.FailsafeOutboundHostPorts, fc.FailsafeOutboundHostPorts)
	return fc
}

// hostPorts converts failsafe ports (validated: known protocol, no
// net); unset keeps def.
func hostPorts(pps *[]api.ProtoPort, def []policy.HostPort) []policy.HostPort {
	if pps == nil {
		return def
	}
	out := make([]policy.HostPort, 0, len(*pps))
	for _, pp := range *pps {
		proto, err := api.ProtoPortNumber(pp.Protocol)
		if err != nil {
			continue // Validate refused it before it was stored
		}
		out = append(out, policy.HostPort{Proto: proto, Port: pp.Port})
	}
	return out
}

// felixConfig follows "default" and "node.<name>" in the node feed and
// applies the live fields (feed.Consumer).
type felixConfig struct {
	node      string
	baseLevel logrus.Level
	felix     *felix.Felix // nil on a route reflector: the log level only
	atStart   api.FelixConfigurationSpec
	// global and own are the last "default" and "node.<name>" seen.
	global, own *api.FelixConfiguration
	level       logrus.Level
	// applied, when set (tests), sees each effective configuration.
	applied func(api.FelixConfigurationSpec)
}

func newFelixConfig(node string, base logrus.Level, fx *felix.Felix, atStart api.FelixConfigurationSpec) *felixConfig {
	return &felixConfig{node: node, baseLevel: base, felix: fx, atStart: atStart, level: logrus.GetLevel()}
}

// felixConfigNames keeps, of every FelixConfiguration, this node's two.
func felixConfigNames(node string) feed.SubOption {
	own := api.FelixConfigurationNodePrefix + node
	return feed.OnlyNames(api.KindFelixConfiguration, func(name string) bool { return name == "default" || name == own })
}

// OnBatch implements feed.Consumer.
func (c *felixConfig) OnBatch(b feed.Batch) {
	if b.Snapshot {
		c.global, c.own = nil, nil
	}
	for _, u := range b.Updates {
		if u.Kind != api.KindFelixConfiguration {
			continue
		}
		fc, _ := u.Resource.(*api.FelixConfiguration)
		if u.Deleted {
			fc = nil
		}
		switch u.Name {
		case "default":
			c.global = fc
		case api.FelixConfigurationNodePrefix + c.node:
			c.own = fc
		}
	}
	eff := api.EffectiveFelixConfiguration(c.global, c.own)
	c.apply(eff)
	if c.applied != nil {
		c.applied(eff)
	}
}

func (c *felixConfig) apply(s api.FelixConfigurationSpec) {
	lvl := c.baseLevel
	if sev := api.LogSeverity(s.LogSeverityScreen); sev != "" {
		if l, err := logrus.ParseLevel(strings.ToLower(sev)); err == nil {
			lvl = l
		}
	}
	if lvl != c.level {
		log.WithFields(logrus.Fields{"level": lvl.String(), "was": c.level.String()}).Info("log level from FelixConfiguration logSeverityScreen")
		logrus.SetLevel(lvl)
		c.level = lvl
	}
	if c.felix != nil {
		c.felix.ApplySettings(felixSettings(s))
		c.felix.SetWireguardOverride(s.WireguardEnabled, s.WireguardEnabledV6)
		c.felix.SetWireguardHostOverride(s.WireguardHostEncryptionEnabled)
		c.felix.SetExternalNodes(externalNodes(s))
	}
	if s.RouteRefreshInterval != c.atStart.RouteRefreshInterval {
		log.WithFields(logrus.Fields{"now": s.RouteRefreshInterval, "in use": c.atStart.RouteRefreshInterval}).
			Warn("FelixConfiguration routeRefreshInterval changed: it takes effect when routed restarts")
		c.atStart.RouteRefreshInterval = s.RouteRefreshInterval // say it once
	}
	for _, f := range []struct {
		name     string
		now, was *[]api.ProtoPort
	}{
		{"failsafeInboundHostPorts", s.FailsafeInboundHostPorts, c.atStart.FailsafeInboundHostPorts},
		{"failsafeOutboundHostPorts", s.FailsafeOutboundHostPorts, c.atStart.FailsafeOutboundHostPorts},
	} {
		if !reflect.DeepEqual(f.now, f.was) {
			log.WithField("field", f.name).Warn("FelixConfiguration failsafe ports changed: the new ports take effect when routed restarts; until then the ports in use at start stay open")
		}
	}
	c.atStart.FailsafeInboundHostPorts, c.atStart.FailsafeOutboundHostPorts = s.FailsafeInboundHostPorts, s.FailsafeOutboundHostPorts
}
