package kernel

// Sysctl is one setting under /proc/sys, in the network namespace of the
// thread that writes it.
type Sysctl struct {
	// Path is relative to /proc/sys, slash-separated, with the device
	// name filled in ("net/ipv4/conf/cali0123456789a/proxy_arp").
	Path string
	// Value is what is written, and what a reader compares against
	// after trimming white space.
	Value string
}

// HostDeviceSysctls are the settings a pod's host-side device keeps for
// as long as it exists: the CNI plugin sets them when it creates the
// device, and felix re-asserts them on every device with
// HostDevicePrefix. IPv4: answer ARP for every address (the pod's
// gateway 169.254.1.1 exists nowhere) without delay, and forward. With
// IPv6: proxy NDP (the IPv6 counterpart of proxy ARP), forward, and take
// no router advertisements from the pod (one could otherwise steer the
// host's IPv6 routes).
func HostDeviceSysctls(dev string, ipv6 bool) []Sysctl {
	out := []Sysctl{
		{"net/ipv4/conf/" + dev + "/proxy_arp", "1"},
		{"net/ipv4/neigh/" + dev + "/proxy_delay", "0"},
		{"net/ipv4/conf/" + dev + "/forwarding", "1"},
	}
	if ipv6 {
		out = append(out,
			Sysctl{"net/ipv6/conf/" + dev + "/proxy_ndp", "1"},
			Sysctl{"net/ipv6/conf/" + dev + "/forwarding", "1"},
			Sysctl{"net/ipv6/conf/" + dev + "/accept_ra", "0"},
		)
	}
	return out
}

// HostDeviceCreateSysctls6 are the IPv6 settings the CNI plugin makes
// while it creates a host-side device for a pod with an IPv6 address,
// before the device goes up: IPv6 on, and no kernel-made link-local
// address (the plugin adds the pods' gateway address itself, without
// duplicate address detection, so it is usable at once). felix does not
// re-assert them: changing either on a live device changes its
// addresses under the pod.
func HostDeviceCreateSysctls6(dev string) []Sysctl {
	return []Sysctl{
		{"net/ipv6/conf/" + dev + "/disable_ipv6", "0"},
		{"net/ipv6/conf/" + dev + "/addr_gen_mode", "1"},
	}
}
