package felix

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// wireguardCollector exports the WireGuard devices' peers, read live
// from the devices on felix's loop at each scrape.
type wireguardCollector struct {
	f                        *Felix
	rx, tx, handshake, peers *prometheus.Desc
	held                     *prometheus.Desc
	hostClear, hostEnc       *prometheus.Desc
}

func newWireguardCollector(f *Felix) *wireguardCollector {
	peer := []string{"device", "peer"}
	return &wireguardCollector{f: f,
		rx:        prometheus.NewDesc("routed_wireguard_peer_received_bytes", "Bytes received from the peer node over WireGuard.", peer, nil),
		tx:        prometheus.NewDesc("routed_wireguard_peer_sent_bytes", "Bytes sent to the peer node over WireGuard.", peer, nil),
		handshake: prometheus.NewDesc("routed_wireguard_peer_latest_handshake_seconds", "Unix time of the latest handshake with the peer node (0: none yet).", peer, nil),
		peers:     prometheus.NewDesc("routed_wireguard_peers", "Peers on the WireGuard device.", []string{"device"}, nil),
		held:      prometheus.NewDesc("routed_wireguard_held_nodes", "Nodes whose pod traffic is held (no key, or the device not ready).", nil, nil),
		hostClear: prometheus.NewDesc("routed_wireguard_host_clear_nodes", "With host encryption on: nodes whose host traffic goes in clear (no key, or no handshake yet), by device.", []string{"device"}, nil),
		hostEnc:   prometheus.NewDesc("routed_wireguard_host_encrypted_nodes", "With host encryption on: nodes whose host traffic goes through the device.", []string{"device"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *wireguardCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.rx, c.tx, c.handshake, c.peers, c.held, c.hostClear, c.hostEnc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. Nothing while felix is not
// running or WireGuard is off.
func (c *wireguardCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.f.running.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := c.f.Wireguard(ctx)
	if err != nil || (!st.Enabled && !st.EnabledV6) {
		return
	}
	for _, d := range st.Devices {
		ch <- prometheus.MustNewConstMetric(c.peers, prometheus.GaugeValue, float64(len(d.Peers)), d.Name)
		for _, p := range d.Peers {
			ch <- prometheus.MustNewConstMetric(c.rx, prometheus.CounterValue, float64(p.RxBytes), d.Name, p.Node)
			ch <- prometheus.MustNewConstMetric(c.tx, prometheus.CounterValue, float64(p.TxBytes), d.Name, p.Node)
			hs := 0.0
			if !p.LastHandshake.IsZero() {
				hs = float64(p.LastHandshake.Unix())
			}
			ch <- prometheus.MustNewConstMetric(c.handshake, prometheus.GaugeValue, hs, d.Name, p.Node)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(len(st.Held)))
	if st.HostEncryption {
		clear, enc := map[string]int{}, map[string]int{}
		for _, d := range st.Devices {
			clear[d.Name], enc[d.Name] = 0, 0
		}
		for _, h := range st.HostPeers {
			clear[h.Device] += 0 // a device the status could not read still counts
			if h.Encrypted {
				enc[h.Device]++
			} else {
				clear[h.Device]++
			}
		}
		for dev, n := range clear {
			ch <- prometheus.MustNewConstMetric(c.hostClear, prometheus.GaugeValue, float64(n), dev)
			ch <- prometheus.MustNewConstMetric(c.hostEnc, prometheus.GaugeValue, float64(enc[dev]), dev)
		}
	}
}
