package felix

import "github.com/vishvananda/netlink"

// What arrives decrypted on wg.routed passes the kernel's reverse-path
// check with the larger of net.ipv4.conf.all.rp_filter and the
// device's own (IN_DEV_MAXCONF). The device has no address, and for
// such a device the check fails in loose mode (2) as in strict (1)
// whenever the route back to the source leaves by another interface
// (__fib_validate_source: no address, "last resort", any rp_filter
// rejects). That drops every packet from a source this node does not
// route through the device: another node's host reaching this node's
// pods (the other node routes the pods' block through its device with
// its node address as the source, while this node routes that address
// by the uplink), and host traffic from a peer that encrypts it while
// this node does not (host encryption refused here, or the peer not
// confirmed yet). WireGuard already drops a decrypted packet whose
// source is not in the sending peer's allowed IPs, a stricter check
// than the reverse path's, so felix turns the device's own filtering
// off (0) when it got one from net.ipv4.conf.default (copied when the
// device was made). A nonzero all cannot be overridden per device:
// felix says so once per device and leaves it (docs/wireguard.md).

// wgRPFilter checks the reverse-path filtering of family fam's device
// (IPv4 only: IPv6 has none) once per device made, on a full resync,
// or after a failed check.
func (l *loop) wgRPFilter(fam int, link netlink.Link, full bool) {
	w := l.f.wg
	if fam != wg4 || link == nil {
		return
	}
	idx := link.Attrs().Index
	if idx == w.rpfChecked && !full {
		return
	}
	name := link.Attrs().Name
	vals, err := readConfIntsIn(l.cfg.NetNSPath, []string{"all", name}, "rp_filter")
	lg := l.log.WithField("device", name)
	if err != nil {
		lg.WithError(err).Warn("WireGuard: cannot read the device's reverse-path filtering")
		w.rpfChecked = 0
		return
	}
	w.rpfChecked = idx
	switch all := vals["all.rp_filter"]; {
	case all != 0:
		if w.rpfWarned != idx {
			w.rpfWarned = idx
			lg.WithField("rp_filter", all).Warn("net.ipv4.conf.all.rp_filter is not 0: traffic from other nodes' host addresses that arrives through the WireGuard device " +
				"(another node's host reaching this node's pods, host traffic a peer encrypts while this node does not) fails the reverse-path check " +
				"(the device has no address, so even loose filtering drops it) and is dropped; set net.ipv4.conf.all.rp_filter=0")
		}
	case vals[name+".rp_filter"] != 0:
		if _, err := writeSysctls(l.cfg.NetNSPath, []sysctl{{path: "net/ipv4/conf/" + name + "/rp_filter", value: "0", optional: true}}); err != nil {
			lg.WithError(err).Warn("WireGuard: cannot turn the device's reverse-path filtering off")
			w.rpfChecked = 0
			return
		}
		lg.WithField("was", vals[name+".rp_filter"]).Info("WireGuard device's rp_filter set to 0: it came from net.ipv4.conf.default and would drop " +
			"other nodes' host traffic through the device (WireGuard's allowed IPs check the source already)")
	}
}
