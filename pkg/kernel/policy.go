package kernel

// The policy tables felix writes (felix/policy/nftdp) and the CNI plugin
// reads before ADD returns (pkg/kernel/policytable): a table of this name
// in the ip and ip6 families, and in each a verdict map per direction from
// a workload interface's name to its chain. An interface in both maps of
// a family's table has its policy (or its profiles' allow) in force there.
const (
	PolicyTable           = "routed-policy"
	PolicyFromWorkloadMap = "from-wl-dispatch"
	PolicyToWorkloadMap   = "to-wl-dispatch"
)
