package plugin

import "github.com/routed-net/routed/cniplugin/netconf"

// The network configuration, CNI_ARGS, node name and log file are
// cniplugin/netconf's, which the socket-only routed-ipam links without
// this package's dataplane; these names keep the plugin's code and
// tests reading as before.

// NetConf is the plugin's network configuration (netconf.NetConf).
type NetConf = netconf.NetConf

// K8sArgs are the CNI_ARGS of Kubernetes pods (netconf.K8sArgs).
type K8sArgs = netconf.K8sArgs

// Default locations and MTU (netconf's).
const (
	DefaultLogFile      = netconf.DefaultLogFile
	DefaultMTUFile      = netconf.DefaultMTUFile
	DefaultNodenameFile = netconf.DefaultNodenameFile
	DefaultMTU          = netconf.DefaultMTU
	SocketOff           = netconf.SocketOff
)

// errConfig marks configuration problems (CNI code 7).
var errConfig = netconf.ErrConfig

// ParseNetConf decodes and checks stdin (netconf.ParseNetConf).
func ParseNetConf(stdin []byte) (*NetConf, error) { return netconf.ParseNetConf(stdin) }

// ParseK8sArgs reads CNI_ARGS (netconf.ParseK8sArgs).
func ParseK8sArgs(s string) (K8sArgs, error) { return netconf.ParseK8sArgs(s) }
