package api

import (
	"fmt"
	"sort"
	"strings"
)

// What routed does with each Calico FelixConfiguration field that is not
// one of routed's own (FelixConfigurationSpec, which routed honours).
// Refused: ignoring the value would change routing or security, so the
// file is an error saying why (the value that matches what routed does
// anyway applies, silently). Warned: the value is dropped with a
// warning carrying the reason. TestFelixConfigurationTable checks that
// every field of Calico's FelixConfigurationSpec is honoured or listed
// here, and docs/felixconfiguration.md is this table.

// felixHonoured says, for each of routed's own fields, how it is
// honoured (the docs table's reason column).
var felixHonoured = map[string]string{
	"ipipMTU":                        "MTU of tunl0, and of pods while IPIP is in use (0: host MTU - 20)",
	"vxlanMTU":                       "MTU of vxlan.routed, and of pods while IPv4 VXLAN is in use (0: host MTU - 50)",
	"vxlanMTUV6":                     "MTU of vxlan-v6.routed, and of pods while IPv6 VXLAN is in use (0: host MTU - 70)",
	"vxlanPort":                      "UDP port of both VXLAN devices (unset: 4789); every node must use the same",
	"vxlanVNI":                       "VNI of both VXLAN devices (unset: 4096); every node must use the same",
	"routeRefreshInterval":           "how often felix re-reads routes, devices and tables in full (0: the default, 90 s)",
	"logSeverityScreen":              "routed's log level",
	"failsafeInboundHostPorts":       "ports to the node that no host endpoint policy closes (net is refused: routed opens them to every peer)",
	"failsafeOutboundHostPorts":      "ports from the node that no host endpoint policy closes (net is refused)",
	"wireguardEnabled":               "WireGuard encryption of IPv4 pod traffic between nodes, live (unset: routed's --wireguard); see docs/wireguard.md",
	"wireguardEnabledV6":             "WireGuard encryption of IPv6 pod traffic between nodes, live (unset: routed's --wireguard-v6)",
	"externalNodesList":              "addresses or CIDRs besides the nodes' own that may send the nodes IPIP and VXLAN packets (others are dropped before decapsulation, counted encap-src/not-node), live; a bad entry is refused",
	"wireguardHostEncryptionEnabled": "WireGuard encryption of traffic between the nodes' host addresses too, to each node with a key once a handshake with it succeeded (others in clear, never held), live (unset: routed's --wireguard-host-encryption)",
}

// felixWarned groups the fields routed drops, by reason.
var felixWarned = map[string][]string{
	"routed re-reads the kernel in full every routeRefreshInterval and follows netlink events in between; it has no separate timer for this": {
		"interfaceRefreshInterval", "iptablesRefreshInterval", "iptablesPostWriteCheckInterval", "iptablesLockProbeInterval",
		"ipsetsRefreshInterval", "xdpRefreshInterval", "netlinkTimeout", "nftablesRefreshInterval", "dataplaneWatchdogTimeout"},
	"routed's policy lives in nftables tables of its own (felix/policy/README.md): allowed packets are accepted and denied ones dropped there, whatever the iptables settings": {
		"iptablesBackend", "iptablesFilterAllowAction", "iptablesMangleAllowAction", "iptablesFilterDenyAction",
		"nftablesFilterAllowAction", "nftablesMangleAllowAction", "nftablesFilterDenyAction", "iptablesMarkMask", "nftablesMarkMask",
		"chainInsertMode", "iptablesNATOutgoingInterfaceFilter", "maxIpsetSize", "featureDetectOverride", "featureGates",
		"disableConntrackInvalidCheck", "nftablesFlowTableOffload", "nftablesFlowTableDataIfacePattern"},
	"routed logs to standard error at logSeverityScreen; the policy Log action is set with --policy-log-group and --policy-log-rate": {
		"logPrefix", "logActionRateLimit", "logActionRateLimitBurst", "logFilePath", "logSeverityFile", "logSeveritySys", "logDebugFilenameRegex"},
	"routed serves health on --health-listen and metrics on --metrics-listen (ROUTED_HEALTH_LISTEN, ROUTED_METRICS_LISTEN), without TLS": {
		"healthEnabled", "healthHost", "healthPort", "healthTimeoutOverrides", "prometheusMetricsEnabled", "prometheusMetricsHost",
		"prometheusMetricsPort", "prometheusGoMetricsEnabled", "prometheusProcessMetricsEnabled", "prometheusMetricsCAFile",
		"prometheusMetricsCertFile", "prometheusMetricsKeyFile", "prometheusMetricsClientAuth"},
	"routed writes no endpoint status or usage reports": {
		"reportingInterval", "reportingTTL", "endpointReportingEnabled", "endpointReportingDelay", "endpointStatusPathPrefix",
		"usageReportingEnabled", "usageReportingInitialDelay", "usageReportingInterval"},
	"OpenStack only": {"metadataAddr", "metadataPort", "openstackRegion"},
	"debugging switches of Calico's felix": {
		"debugMemoryProfilePath", "debugDisableLogDropping", "debugSimulateCalcGraphHangAfter", "debugSimulateDataplaneHangAfter",
		"debugSimulateDataplaneApplyDelay", "debugHost", "debugPort"},
	"a setting of Calico's eBPF dataplane, which routed does not have (bpfEnabled: true is refused)": {
		"bpfDisableUnprivileged", "bpfJITHardening", "bpfLogLevel", "bpfConntrackLogLevel", "bpfConntrackMode", "bpfConntrackTimeouts",
		"bpfIPFragTimeout", "bpfLogFilters", "bpfCTLBLogFilter", "bpfDataIfacePattern", "bpfL3IfacePattern",
		"bpfConnectTimeLoadBalancingEnabled", "bpfConnectTimeLoadBalancing", "bpfHostNetworkedNATWithoutCTLB", "bpfExternalServiceMode",
		"bpfDSROptoutCIDRs", "bpfExtToServiceConnmark", "bpfKubeProxyIptablesCleanupEnabled", "bpfKubeProxyMinSyncPeriod",
		"bpfKubeProxyHealthzPort", "bpfPSNATPorts", "bpfMapSizeNATFrontend", "bpfMapSizeNATBackend", "bpfMapSizeNATAffinity",
		"bpfMapSizeRoute", "bpfMapSizeConntrack", "bpfMapSizePerCpuConntrack", "bpfMapSizeConntrackScaling",
		"bpfMapSizeConntrackCleanupQueue", "bpfMapSizeIPSets", "bpfMapSizeIfState", "bpfHostConntrackBypass",
		"bpfIPFragmentReassemblyEnabled", "bpfEnforceRPF", "bpfPolicyDebugEnabled", "bpfForceTrackPacketsFromIfaces",
		"bpfDisableGROForIfaces", "bpfExcludeCIDRsFromNAT", "bpfExportBufferSizeMB", "bpfRedirectToPeer", "bpfAttachType",
		"bpfProfiling", "bpfOverlayHostSourceIP", "bpfMaglevMaxEndpointsPerService", "bpfMaglevMaxServices", "cgroupV2Path"},
	"routed's WireGuard takes its port, MTU and device names from its own flags (--wireguard-port, --wireguard-mtu; docs/wireguard.md), always exports its metrics, and has no keep-alive, threading or routing rule settings": {
		"wireguardThreadingEnabled", "wireguardListeningPort", "wireguardListeningPortV6", "wireguardRoutingRulePriority",
		"wireguardInterfaceName", "wireguardInterfaceNameV6", "wireguardMTU", "wireguardMTUV6", "wireguardKeepAlive",
		"prometheusWireGuardMetricsEnabled"},
	"routed runs no XDP programs: doNotTrack policy is applied in nftables": {"xdpEnabled", "genericXDPEnabled"},
	"routed has no flow logs to export: the policy log is `routedctl policy log`": {
		"flowLogsPolicyEvaluationMode", "flowLogsFlushInterval", "flowLogsCollectorDebugTrace", "flowLogsGoldmaneServer", "flowLogsLocalReporter"},
	"routed has no Istio ambient mode integration":                                                                                   {"istioAmbientMode", "istioDSCPMark"},
	"set GOGC, GOMEMLIMIT and GOMAXPROCS in routed's environment instead":                                                            {"goGCThreshold", "goMemoryLimitMB", "goMaxProcs"},
	"routed only programs the cali* interfaces of its pods and devices of its own":                                                   {"interfaceExclude"},
	"routed takes the host MTU from the device holding the node address (or the default route's)":                                    {"mtuIfacePattern"},
	"routed's routes to pods carry no preferred source address":                                                                      {"deviceRouteSourceAddress", "deviceRouteSourceAddressIPv6"},
	"routed marks its routes with protocol 82, the number its CNI plugin writes too (pkg/kernel)":                                    {"deviceRouteProtocol"},
	"routed removes only routes it marked (protocol 82); other routes are left alone":                                                {"removeExternalRoutes"},
	"routed programs the main routing table":                                                                                         {"routeTableRanges", "routeTableRange"},
	"Calico uses it only with kube-proxy in IPVS mode, to tell host traffic from workload traffic; routed does not read it":          {"kubeNodePortRanges"},
	"routed has no policy sync API for application-layer policy (Dikastes)":                                                          {"policySyncPathPrefix", "sidecarAccelerationEnabled"},
	"routed always writes the pod MTU file":                                                                                          {"requireMTUFile"},
	"routed does not answer ARP/NDP for pod addresses on host interfaces (localSubnetL2Reachability other than Disabled is refused)": {"localSubnetL2ReachabilityRefreshInterval"},
	"Windows only": {"windowsManageFirewallRules"},
	"KubeVirt live migration is not supported by routed's routes":                                                            {"liveMigrationRouteConvergenceTime"},
	"routed programs its own dataplane; useInternalDataplaneDriver: false is refused":                                        {"dataplaneDriver"},
	"routed does not change the EC2 source/destination check: disable it on the instances":                                   {"awsSrcDstCheck"},
	"routed programs IPv6 when it runs with an IPv6 node address (--ip6, IP6); this field is not read":                       {"ipv6Support"},
	"routed does not drop traffic to Service CIDRs that kube-proxy does not handle; Calico's loop prevention is not applied": {"serviceLoopPrevention"},
	"routed enables forwarding on the interfaces it programs, whatever this says":                                            {"ipForwarding"},
}

// felixRefusal is a field whose value routed must not ignore: every
// value but ok (routed's own behaviour, applied silently) is refused.
type felixRefusal struct {
	name string
	ok   string // routed's value, as the docs table shows it
	why  string
	test func(why string) func(any) string
}

func whenSet(why string) func(any) string {
	return func(v any) string {
		if v == nil || v == "" {
			return ""
		}
		return why
	}
}

func isNumber(n float64) func(string) func(any) string {
	return func(why string) func(any) string { return unlessNumber(n, why) }
}

func isString(s string) func(string) func(any) string {
	return func(why string) func(any) string { return unless(s, why) }
}

const noBPF = "routed has no eBPF dataplane: policy and Services would be enforced by nftables and kube-proxy instead of what this cluster expects"

var felixRefusals = []felixRefusal{
	{"bpfEnabled", "false", noBPF, whenTrue},
	// Unset passes here although Calico felix's own default is Drop:
	// calico-node's FELIX_DEFAULTENDPOINTTOHOSTACTION overrides every
	// FelixConfiguration (Calico's manifests and operator set ACCEPT), and
	// a file alone cannot say what it is. The migration takes the
	// effective value from the environment (routed/migrate/felixenv.go).
	//
	// Return is routed's own behaviour: routed accepts in its own
	// nftables table, which ends only that table's chain, so the host's
	// own firewall rules on the input hook still decide after it, as
	// after Calico's RETURN (felix/policy TestEndpointToHostIsReturn);
	// Accept differs only in skipping the host's later iptables INPUT
	// rules, so routed is never looser than it.
	{"defaultEndpointToHostAction", "Accept or Return", "routed accepts traffic from a pod to its host once the pod's egress policy allowed it and leaves the host's own firewall rules to decide after it (Calico's Return, never looser than Accept); Drop would be ignored and pods would reach their host where Calico stops them", func(why string) func(any) string { return unlessFold(why, "Accept", "Return") }},
	{"natOutgoingAddress", "unset", "routed masquerades pod traffic to the address of the interface it leaves by; a fixed source address is not supported, and upstream firewalls may admit only that one", whenSet},
	{"natPortRange", "unset", "routed's masquerade lets the kernel choose source ports; a fixed range is not supported", whenSet},
	{"natOutgoingExclusions", "IPPoolsOnly", "routed leaves traffic to pool addresses unmasqueraded and masquerades all else; IPPoolsAndHostIPs would also spare traffic to the hosts", isString("IPPoolsOnly")},
	{"interfacePrefix", "cali", "routed's pods' host interfaces are cali* (the name its CNI plugin gives them); other prefixes are not programmed", isString("cali")},
	{"ipipEnabled", "true", "routed uses IPIP wherever a pool's ipipMode asks for it; Calico with ipipEnabled false would not", unlessTrue},
	{"vxlanEnabled", "true", "routed uses VXLAN wherever a pool's vxlanMode asks for it; Calico with vxlanEnabled false would not", unlessTrue},
	{"allowIPIPPacketsFromWorkloads", "false", "routed drops IPIP (and IPv6-in-IPv4) packets sent by pods, as Calico does by default: a pod could otherwise send, through the nodes' tunnel devices, from any pod's address; pods that need to send them would be cut off", whenTrue},
	{"allowVXLANPacketsFromWorkloads", "false", "routed drops pods' UDP to the nodes' VXLAN port, as Calico does by default: a pod could otherwise send, through the nodes' VXLAN devices, from any pod's address; pods that need to send VXLAN would be cut off", whenTrue},
	{"routeSyncDisabled", "false", "routed always programs the routes to pods and blocks; another agent programming them too would fight it", whenTrue},
	{"routeSource", "CalicoIPAM", "routed routes the blocks IPAM hands out; routes per workload address (WorkloadIPs) are not supported", isString("CalicoIPAM")},
	{"useInternalDataplaneDriver", "true", "routed always programs its own dataplane; an external dataplane driver is not supported", unlessTrue},
	{"workloadSourceSpoofing", "Disabled", "routed does not read the allowedSourcePrefixes annotation: pods that Calico lets send from addresses not theirs (Any) would not be served as in Calico", isString("Disabled")},
	{"localSubnetL2Reachability", "Disabled", "routed does not answer ARP/NDP on host interfaces for pod or LoadBalancer addresses: what Calico makes reachable on the local L2 segment would be reachable only through BGP", isString("Disabled")},
	{"nodeSelector", "unset", `routed reads FelixConfiguration "default" and "node.<name>" only: a configuration for the nodes a selector picks would never apply`, whenSet},
	{"floatingIPs", "Disabled", "routed does not DNAT OpenStack floating IPs to pods", isString("Disabled")},
	{"ipv4NormalRoutePriority", "1024", routePriorityWhy, isNumber(1024)},
	{"ipv6NormalRoutePriority", "1024", routePriorityWhy, isNumber(1024)},
	{"ipv4ElevatedRoutePriority", "512", routePriorityWhy, isNumber(512)},
	{"ipv6ElevatedRoutePriority", "512", routePriorityWhy, isNumber(512)},
}

// felixQuiet are fields dropped silently at routed's value, with a
// warning at any other.
var felixQuiet = []struct{ name, ok, why string }{
	{"programClusterRoutes", "Enabled", "in routed felix always programs the routes to other nodes' blocks"},
	{"nftablesMode", "Enabled", "routed's policy is always in nftables"},
}

// felixCalicoFields is calicoFields[KindFelixConfiguration].
func felixCalicoFields() []calicoField {
	var out []calicoField
	for _, r := range felixRefusals {
		out = append(out, calicoField{path: "spec." + r.name, refuse: r.test(r.why)})
	}
	for _, q := range felixQuiet {
		ok := q.ok
		out = append(out, calicoField{path: "spec." + q.name, note: q.why, quiet: func(v any) bool { return v == ok || v == "Auto" && ok == "Enabled" }})
	}
	reasons := make([]string, 0, len(felixWarned))
	for why := range felixWarned {
		reasons = append(reasons, why)
	}
	sort.Strings(reasons)
	for _, why := range reasons {
		for _, name := range felixWarned[why] {
			out = append(out, calicoField{path: "spec." + name, note: why})
		}
	}
	return out
}

// unlessFold is unless with any of oks, comparing without case (Calico
// reads defaultEndpointToHostAction that way).
func unlessFold(why string, oks ...string) func(any) string {
	return func(v any) string {
		s, isStr := v.(string)
		if v == nil || (isStr && s == "") {
			return ""
		}
		for _, ok := range oks {
			if isStr && strings.EqualFold(s, ok) {
				return ""
			}
		}
		return why
	}
}

// unlessTrue refuses false (nil and true are what routed does).
func unlessTrue(why string) func(any) string {
	return func(v any) string {
		switch v {
		case false:
			return why
		case true, nil:
			return ""
		}
		return notBoolean(v, why)
	}
}

// FelixConfigurationField is one row of the FelixConfiguration table:
// a Calico field, what routed does with it, and why.
type FelixConfigurationField struct {
	Name    string
	Verdict string // "honoured", "refused" or "warned"
	Why     string
}

// FelixConfigurationFields lists, sorted by name, what routed does with
// each Calico FelixConfiguration field it knows (docs/felixconfiguration.md).
func FelixConfigurationFields() []FelixConfigurationField {
	var out []FelixConfigurationField
	for name, why := range felixHonoured {
		out = append(out, FelixConfigurationField{Name: name, Verdict: "honoured", Why: why})
	}
	for _, r := range felixRefusals {
		out = append(out, FelixConfigurationField{Name: r.name, Verdict: "refused unless " + r.ok, Why: r.why})
	}
	for _, q := range felixQuiet {
		out = append(out, FelixConfigurationField{Name: q.name, Verdict: "warned unless " + q.ok, Why: q.why})
	}
	for why, names := range felixWarned {
		for _, name := range names {
			out = append(out, FelixConfigurationField{Name: name, Verdict: "warned", Why: why})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// FelixConfigurationDocRow is r as a row of the table in
// docs/felixconfiguration.md.
func FelixConfigurationDocRow(r FelixConfigurationField) string {
	esc := strings.NewReplacer("|", `\|`)
	return fmt.Sprintf("| `%s` | %s | %s |", r.Name, esc.Replace(r.Verdict), esc.Replace(r.Why))
}
