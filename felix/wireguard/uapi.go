package wireguard

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// uapiSet renders cfg in WireGuard's cross-platform configuration
// protocol ("set" body, keys in hex), which wireguard-go's IpcSet reads.
func uapiSet(cfg wgtypes.Config) string {
	var b strings.Builder
	if cfg.PrivateKey != nil {
		fmt.Fprintf(&b, "private_key=%s\n", hex.EncodeToString(cfg.PrivateKey[:]))
	}
	if cfg.ListenPort != nil {
		fmt.Fprintf(&b, "listen_port=%d\n", *cfg.ListenPort)
	}
	if cfg.FirewallMark != nil {
		fmt.Fprintf(&b, "fwmark=%d\n", *cfg.FirewallMark)
	}
	if cfg.ReplacePeers {
		b.WriteString("replace_peers=true\n")
	}
	for _, p := range cfg.Peers {
		fmt.Fprintf(&b, "public_key=%s\n", hex.EncodeToString(p.PublicKey[:]))
		if p.Remove {
			b.WriteString("remove=true\n")
			continue
		}
		if p.UpdateOnly {
			b.WriteString("update_only=true\n")
		}
		if p.Endpoint != nil {
			ap := p.Endpoint.AddrPort()
			fmt.Fprintf(&b, "endpoint=%s\n", netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
		}
		if p.PersistentKeepaliveInterval != nil {
			fmt.Fprintf(&b, "persistent_keepalive_interval=%d\n", int(p.PersistentKeepaliveInterval.Seconds()))
		}
		if p.ReplaceAllowedIPs {
			b.WriteString("replace_allowed_ips=true\n")
		}
		for _, n := range p.AllowedIPs {
			fmt.Fprintf(&b, "allowed_ip=%s\n", n.String())
		}
	}
	return b.String()
}

// uapiGet reads a "get" reply into a wgtypes.Device.
func uapiGet(name, s string) (*wgtypes.Device, error) {
	d := &wgtypes.Device{Name: name, Type: wgtypes.Userspace}
	var p *wgtypes.Peer
	var hsSec, hsNsec int64
	flush := func() {
		if p != nil {
			if hsSec != 0 || hsNsec != 0 {
				p.LastHandshakeTime = time.Unix(hsSec, hsNsec)
			}
			d.Peers = append(d.Peers, *p)
		}
		hsSec, hsNsec = 0, 0
	}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("wireguard: %s: bad configuration line %q", name, line)
		}
		var err error
		switch k {
		case "private_key":
			d.PrivateKey, err = hexKey(v)
			d.PublicKey = d.PrivateKey.PublicKey()
		case "listen_port":
			d.ListenPort, err = strconv.Atoi(v)
		case "fwmark":
			d.FirewallMark, err = strconv.Atoi(v)
		case "public_key":
			flush()
			p = &wgtypes.Peer{}
			p.PublicKey, err = hexKey(v)
		case "errno":
			if v != "0" {
				return nil, fmt.Errorf("wireguard: %s: device reported errno %s", name, v)
			}
		default:
			if p == nil {
				continue // a device field this reader does not use
			}
			err = peerLine(p, k, v, &hsSec, &hsNsec)
		}
		if err != nil {
			return nil, fmt.Errorf("wireguard: %s: %s=%q: %w", name, k, v, err)
		}
	}
	flush()
	return d, sc.Err()
}

func peerLine(p *wgtypes.Peer, k, v string, hsSec, hsNsec *int64) error {
	var err error
	switch k {
	case "endpoint":
		var ap netip.AddrPort
		if ap, err = netip.ParseAddrPort(v); err == nil {
			p.Endpoint = net.UDPAddrFromAddrPort(ap)
		}
	case "allowed_ip":
		var n netip.Prefix
		if n, err = netip.ParsePrefix(v); err == nil {
			p.AllowedIPs = append(p.AllowedIPs, net.IPNet{IP: n.Addr().AsSlice(), Mask: net.CIDRMask(n.Bits(), n.Addr().BitLen())})
		}
	case "last_handshake_time_sec":
		*hsSec, err = strconv.ParseInt(v, 10, 64)
	case "last_handshake_time_nsec":
		*hsNsec, err = strconv.ParseInt(v, 10, 64)
	case "rx_bytes":
		p.ReceiveBytes, err = strconv.ParseInt(v, 10, 64)
	case "tx_bytes":
		p.TransmitBytes, err = strconv.ParseInt(v, 10, 64)
	case "persistent_keepalive_interval":
		var n int
		n, err = strconv.Atoi(v)
		p.PersistentKeepaliveInterval = time.Duration(n) * time.Second
	case "protocol_version":
		p.ProtocolVersion, err = strconv.Atoi(v)
	}
	return err
}

func hexKey(v string) (wgtypes.Key, error) {
	b, err := hex.DecodeString(v)
	if err != nil {
		return wgtypes.Key{}, err
	}
	return wgtypes.NewKey(b)
}
