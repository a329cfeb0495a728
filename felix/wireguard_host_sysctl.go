package felix

import (
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/routed-net/routed/pkg/kernel/nldump"
)

// IPv4 host encryption depends on two ARP checks of the kernel (the
// peers' host addresses route through wg.routed in table 82, their ARP
// arrives on the uplink):
//
//   - rp_filter: arp_process looks the sender up with ip_route_input,
//     whose reverse-path check (fib_validate_source) uses the skb's mark
//     when src_valid_mark is on. Strict (1) drops the request unless the
//     arp table of wireguard.IncomingMark marks it. The effective value
//     is the larger of all's and the device's (IN_DEV_MAXCONF).
//   - arp_filter: arp_filter() in net/ipv4/arp.c looks the route from
//     this node back to the sender up with ip_route_output, whose flow
//     carries no mark: it finds table 82's wg.routed instead of the
//     uplink and ignores the request, whatever nftables marks. Nothing
//     in a routing rule tells that lookup apart from this host's own
//     traffic to the peer (no mark, uid 0, iif lo, no protocol or port
//     a rule can match). On when all's or the device's is 1
//     (IN_DEV_ORCONF).
//
// Which devices: all, and every interface a peer's ARP request can
// arrive on (hostARPDevices): the uplink and each interface whose IPv4
// subnet holds a peer's host address. A peer behind a router never
// ARPs for this node (its router does, from an address table 82 does
// not hold). `default` is not read: it is a template, copied to an
// interface when the interface is made and, when written, to every
// existing interface whose own value was never written (devinet's
// devinet_copy_dflt_conf), so an interface's own file already shows
// what default gave it. The devices' own (wg.routed) do not matter
// here: ARP never arrives on them (no link layer).
//
// hostV4Refusal says why IPv4 host encryption must not be turned on
// (the node would stop answering its peers' ARP, and once the
// neighbour entries expire they lose each other on the uplink,
// WireGuard's own UDP included), or "" when it may. arpUnmarked is why
// incoming ARP is not marked (nil: it is).
func (l *loop) hostV4Refusal(arpUnmarked error) (string, error) {
	devs, err := l.hostARPDevices()
	if err != nil {
		return "", err
	}
	devs = append([]string{"all"}, devs...)
	vals, err := readConfIntsIn(l.cfg.NetNSPath, devs, "arp_filter", "rp_filter")
	if err != nil {
		return "", err
	}
	for _, d := range devs {
		if vals[d+".arp_filter"] != 0 {
			return fmt.Sprintf("net.ipv4.conf.%s.arp_filter=1: the kernel's ARP filter looks the route back to a peer up without felix's mark, "+
				"finds %s instead of the interface the request came on and ignores the peer's ARP requests (set arp_filter=0 on all and on each interface the peers are on to encrypt host traffic)",
				d, hostDevices[wg4]), nil
		}
	}
	if arpUnmarked != nil {
		for _, d := range devs {
			if vals[d+".rp_filter"] == 1 {
				return fmt.Sprintf("net.ipv4.conf.%s.rp_filter=1 (strict) and incoming ARP cannot be marked (%v): "+
					"the reverse-path check would route a peer's ARP requests back through %s and ignore them (set rp_filter to 0 or 2 on all and on each interface the peers are on, "+
					"or use a kernel with CONFIG_NF_TABLES_ARP)", d, arpUnmarked, hostDevices[wg4]), nil
			}
		}
	}
	return "", nil
}

// hostARPDevices names the interfaces the peers' ARP requests arrive
// on: the uplink, and each interface (not lo, not the WireGuard
// devices) holding an IPv4 address whose subnet holds a peer's host
// address, sorted.
func (l *loop) hostARPDevices() ([]string, error) {
	addrs, err := nldump.Retry(func() ([]netlink.Addr, error) { return l.h.AddrList(nil, netlink.FAMILY_V4) })
	if err != nil {
		return nil, fmt.Errorf("felix: listing addresses for the ARP settings: %w", err)
	}
	var subnets []ifSubnet
	names := map[int]string{}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || a.IPNet == nil {
			continue
		}
		ones, _ := a.Mask.Size()
		name, ok := names[a.LinkIndex]
		if !ok {
			link, err := l.h.LinkByIndex(a.LinkIndex)
			if err != nil {
				continue // gone since the dump, with its addresses
			}
			name = link.Attrs().Name
			names[a.LinkIndex] = name
		}
		subnets = append(subnets, ifSubnet{dev: name, net: netip.PrefixFrom(ip.Unmap(), ones).Masked()})
	}
	return onLinkDevices(l.hosts.uplinks[wg4], subnets, slices.Collect(maps.Keys(l.plan.wg[wg4].byAddr))), nil
}

// ifSubnet is an interface's IPv4 subnet.
type ifSubnet struct {
	dev string
	net netip.Prefix
}

// onLinkDevices is uplink ("" for none) and the interfaces of subnets
// whose subnet holds one of peers, without lo and the WireGuard
// devices, sorted and once each.
func onLinkDevices(uplink string, subnets []ifSubnet, peers []netip.Addr) []string {
	set := map[string]bool{}
	if uplink != "" {
		set[uplink] = true
	}
	for _, sn := range subnets {
		if sn.dev == "lo" || sn.dev == hostDevices[wg4] || sn.dev == hostDevices[wg6] || set[sn.dev] {
			continue
		}
		for _, p := range peers {
			if sn.net.Contains(p) {
				set[sn.dev] = true
				break
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// readConfIntsIn is readConfInts in the namespace at nsPath ("": this
// thread's).
func readConfIntsIn(nsPath string, devs []string, keys ...string) (map[string]int, error) {
	if nsPath == "" {
		return readConfInts(devs, keys...)
	}
	var vals map[string]int
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		var err error
		vals, err = readConfInts(devs, keys...)
		return err
	})
	return vals, err
}

// readConfInts reads net.ipv4.conf.<dev>.<key> for each device and key
// in the calling thread's namespace, keyed "<dev>.<key>".
func readConfInts(devs []string, keys ...string) (map[string]int, error) {
	out := map[string]int{}
	for _, d := range devs {
		for _, k := range keys {
			p := filepath.Join("/proc/sys/net/ipv4/conf", d, k)
			b, err := os.ReadFile(p)
			if err != nil {
				return nil, fmt.Errorf("felix: reading sysctl net.ipv4.conf.%s.%s: %w", d, k, err)
			}
			v, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				return nil, fmt.Errorf("felix: sysctl net.ipv4.conf.%s.%s is %q: %w", d, k, b, err)
			}
			out[d+"."+k] = v
		}
	}
	return out, nil
}

// hostRefusal is hostV4Refusal, read again at most every
// hostRefusalEvery unless a full resync, the uplink or the marking of
// ARP changed.
func (l *loop) hostRefusal(full bool, hr *wgHostRouting) (string, error) {
	unmarked := hr.mark.ARPUnmarked()
	up := l.hosts.uplinks[wg4]
	if !full && hr.uplink == up && hr.arpOK == (unmarked == nil) && time.Since(hr.refusalAt) < hostRefusalEvery {
		return hr.refusal, nil
	}
	r, err := l.hostV4Refusal(unmarked)
	if err != nil {
		hr.refusalAt = time.Time{} // read again on the next pass
		return "", err
	}
	hr.refusal, hr.refusalAt, hr.uplink, hr.arpOK = r, time.Now(), up, unmarked == nil
	return r, nil
}

// noteHostRefusal records why IPv4 host encryption is refused and why
// incoming ARP is not marked, logging each once when it changes; the
// end of a refusal is logged only when the settings were checked (not
// when the device is merely not ready or host encryption went off).
func (l *loop) noteHostRefusal(refused string, checked bool, arpUnmarked error) {
	h := &l.f.wg.host
	un := ""
	if arpUnmarked != nil {
		un = arpUnmarked.Error()
	}
	if refused != h.refused {
		if refused != "" {
			l.log.WithField("device", hostDevices[wg4]).WithField("reason", refused).
				Warn("WireGuard host encryption refused for IPv4: host traffic to the other nodes goes in clear (pod traffic stays encrypted)")
		} else if h.refused != "" && checked {
			l.log.WithField("device", hostDevices[wg4]).Info("WireGuard host encryption for IPv4 no longer refused")
		}
	}
	if un != h.arpUnmarked && un != "" {
		l.log.WithField("reason", un).Warn("WireGuard host encryption: incoming ARP is not marked, so strict rp_filter (1 on all or the uplink) would make this node ignore its peers' ARP; host encryption is refused while it is strict")
	}
	h.refused, h.arpUnmarked = refused, un
}

// hostWarnings are host encryption's refusal and the unmarked ARP, for
// the status.
func (l *loop) hostWarnings() []string {
	h := &l.f.wg.host
	var out []string
	if h.refused != "" {
		out = append(out, "host encryption refused for IPv4: "+h.refused)
	}
	if h.arpUnmarked != "" {
		out = append(out, "incoming ARP is not marked ("+h.arpUnmarked+"): strict rp_filter (1 on all or the uplink) would make this node ignore its peers' ARP requests, so host encryption is refused while it is set")
	}
	return out
}
