package api

// Route priorities, in Calico's units (FelixConfiguration's
// ...RoutePriority, BGPFilter priority and setPriority): the kernel
// metric a learned route is programmed at, lower wins. BGP carries a
// route's priority in LOCAL_PREF as MaxLocalPref - priority, as Calico's
// BIRD configuration does, so routed and Calico nodes agree on it.
const (
	// DefaultRoutePriority is the priority of the routes a node
	// originates and of learned routes no filter gave one (Calico's
	// ipv4/ipv6NormalRoutePriority); felix programs it at the kernel's
	// default metric for the family.
	DefaultRoutePriority = 1024
	// MaxRoutePriority is the highest priority routed honours. A
	// LOCAL_PREF below LocalPrefForPriority(MaxRoutePriority) reads as
	// DefaultRoutePriority: BGP speakers that know nothing of Calico send
	// 100 (GoBGP, BIRD, FRR), which Calico's formula would turn into
	// metric 2147483547, last behind every route of the same prefix.
	MaxRoutePriority = 65535
	// MaxLocalPref is the LOCAL_PREF of priority 0.
	MaxLocalPref = 2147483647
)

// LocalPrefForPriority is the LOCAL_PREF that carries priority p.
func LocalPrefForPriority(p uint32) uint32 { return MaxLocalPref - p }

// PriorityFromLocalPref is the route priority a LOCAL_PREF carries; a
// LOCAL_PREF outside the range routed honours reads as
// DefaultRoutePriority.
func PriorityFromLocalPref(lp uint32) uint32 {
	if lp > MaxLocalPref || lp < LocalPrefForPriority(MaxRoutePriority) {
		return DefaultRoutePriority
	}
	return MaxLocalPref - lp
}
