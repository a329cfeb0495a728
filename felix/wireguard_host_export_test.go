package felix

import "github.com/google/nftables"

// SetHostARPProbe makes the felix Runs started after it probe
// nftables' arp family with p (nil: the real probe), to stand for a
// kernel without CONFIG_NF_TABLES_ARP.
func SetHostARPProbe(p func(*nftables.Conn) error) {
	if p == nil {
		hostARPProbe.Store(nil)
		return
	}
	hostARPProbe.Store(&p)
}
