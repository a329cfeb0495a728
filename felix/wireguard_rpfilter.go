package felix

import (
	"maps"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
)

// What arrives decrypted on wg.routed passes the kernel's reverse-path
// check with the larger of net.ipv4.conf.all.rp_filter and the
// device's own (IN_DEV_MAXCONF): the route back to the source must
// leave by the device (strict, 1), and loose (2) fails as well when
// that route leaves by another interface and the device has no
// address (__fib_validate_source's "last resort").
//
// Other nodes' hosts reach this node's pods from their devices'
// addresses (wireguard_addr.go), which this node routes back through
// its device, so that traffic passes under any rp_filter. What still
// arrives from an address this node routes by the uplink:
//   - host traffic from a node whose device has no address (no pool
//     selects it, encryption just turned on and its address not
//     allocated yet, or a node running without routed/tunneladdr),
//     sent from its host address;
//   - host traffic a peer encrypts (host encryption) while this node
//     does not route that peer's host address through the device
//     (host encryption refused here, or the peer not confirmed yet).
//
// WireGuard already drops a decrypted packet whose source is not in the
// sending peer's allowed IPs, a stricter check than the reverse path's,
// so felix turns the device's own filtering off (0) when it got one
// from net.ipv4.conf.default (copied when the device was made). A
// nonzero all cannot be overridden per device: felix says so, naming
// the cases above that apply, and leaves it (docs/wireguard.md).

// wgRPFilter checks the reverse-path filtering of family fam's device
// (IPv4 only: IPv6 has none): the sysctls once per device made, on a
// full resync, or after a failed check; the warning whenever the cases
// it names change.
func (l *loop) wgRPFilter(fam int, link netlink.Link, full bool) {
	w := l.f.wg
	if fam != wg4 || link == nil {
		return
	}
	idx := link.Attrs().Index
	name := link.Attrs().Name
	lg := l.log.WithField("device", name)
	if idx != w.rpfChecked || full {
		vals, err := readConfIntsIn(l.cfg.NetNSPath, []string{"all", name}, "rp_filter")
		if err != nil {
			lg.WithError(err).Warn("WireGuard: cannot read the device's reverse-path filtering")
			w.rpfChecked = 0
			return
		}
		w.rpfChecked, w.rpfAll = idx, vals["all.rp_filter"]
		if all, own := vals["all.rp_filter"], vals[name+".rp_filter"]; all == 0 && own != 0 {
			if _, err := writeSysctls(l.cfg.NetNSPath, []sysctl{{path: "net/ipv4/conf/" + name + "/rp_filter", value: "0", optional: true}}); err != nil {
				lg.WithError(err).Warn("WireGuard: cannot turn the device's reverse-path filtering off")
				w.rpfChecked = 0
				return
			}
			lg.WithField("was", own).Info("WireGuard device's rp_filter set to 0: it came from net.ipv4.conf.default and would drop " +
				"other nodes' host traffic through the device (WireGuard's allowed IPs check the source already)")
		}
	}
	why := ""
	if w.rpfAll != 0 {
		why = l.wgRPFUncovered(fam)
	}
	if why == w.rpfWarnedWhy && idx == w.rpfWarned {
		return
	}
	w.rpfWarned, w.rpfWarnedWhy = idx, why
	if why != "" {
		lg.WithField("rp_filter", w.rpfAll).Warn("net.ipv4.conf.all.rp_filter is not 0: traffic from other nodes' host addresses that arrives through the WireGuard device " +
			"fails the reverse-path check and is dropped, here: " + why + "; set net.ipv4.conf.all.rp_filter=0 (other nodes' hosts reaching this node's pods from their devices' addresses pass)")
	}
}

// wgRPFUncovered names the cases of family fam that a nonzero
// all.rp_filter drops (see above), or "" when there are none.
func (l *loop) wgRPFUncovered(fam int) string {
	var why []string
	if l.f.wg.host.on {
		why = append(why, "host encryption is on (host traffic a peer encrypts while this node routes its host address by the uplink)")
	}
	if l.plan == nil {
		return strings.Join(why, "; ")
	}
	var bare []string
	for _, name := range slices.Sorted(maps.Keys(l.plan.wg[fam].peers)) {
		if n := l.st.nodes[name]; n != nil {
			if _, ok := n.WireguardAddress(fam == wg6); !ok {
				bare = append(bare, name)
			}
		}
	}
	if len(bare) > 0 {
		why = append(why, "nodes whose WireGuard device has no address (their hosts reach this node's pods from their host addresses): "+strings.Join(bare, ", "))
	}
	return strings.Join(why, "; ")
}
