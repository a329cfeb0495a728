// Package daemon is routed's composition root: it reads the
// configuration, builds the node's parts (the node feed, felix, confd,
// the BGP speaker, the Node record keeper, tunnel addressing, GC,
// health, metrics and the status socket) from their own packages and
// runs them under one supervisor. It owns no state of its own.
package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/routed-net/routed/pkg/cniapi"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/routed/cnitoken"
	"github.com/routed-net/routed/routed/health"
	"github.com/routed-net/routed/routed/noderecord"
)

// Roles routed can run in.
const (
	RoleNode           = "node"
	RoleRouteReflector = "route-reflector"
)

// Config is everything the daemon needs, from flags and environment.
type Config struct {
	Role      string
	NodeName  string
	IP        string // ADDR/PREFIX, "autodetect" or ""
	IPMethod  string // IP_AUTODETECTION_METHOD
	IP6       string // ADDR/PREFIX, "autodetect", or ""/"none" (no IPv6)
	IP6Method string // IP6_AUTODETECTION_METHOD
	Datastore datastore.Config

	Pool noderecord.DefaultPool

	HealthAddr   string
	MetricsAddr  string
	StatusSocket string
	// CNISocket is where routed serves the CNI plugins (routed/cniserver);
	// empty: cni.sock beside StatusSocket (cniapi.DefaultSocket by
	// default); "none": not served (the plugins then use etcd directly).
	CNISocket string
	BGPPort   int
	LogLevel  string

	StateDir     string // /var/lib/routed: nodename and mtu files
	FelixResync  time.Duration
	IPAMGCPeriod time.Duration
	IPAMGCGrace  time.Duration
	// ClusterGC makes the node a candidate for the cluster-wide GC
	// pass (false when `routed cluster-gc` runs it).
	ClusterGC     bool
	SecretsDir    string
	ShutdownGrace time.Duration
	// FeedCache is the node feed's cache file (feedcache.go): "" for
	// feed-cache in StateDir, "none" for off.
	FeedCache string

	CNIToken CNITokenConfig

	// NodeCondition keeps the Kubernetes Node's NetworkUnavailable
	// condition False once in sync (routed/nodecond), when routed runs
	// in a pod.
	NodeCondition bool

	// DisablePolicy runs felix without the network policy dataplane
	// (kernels without nftables only): every pod then reaches every pod.
	DisablePolicy bool
	// PolicyLog: the nflog group of the Log action and of logged drops
	// (0: no policy log), the per-rule rate limit, and whether drops
	// are logged.
	PolicyLogGroup int
	PolicyLogRate  int
	PolicyLogDrops bool

	// Wireguard encrypts pod traffic between nodes (wireguard.go).
	Wireguard WireguardConfig

	// Flows records connections with their policy verdicts (flows.go).
	Flows FlowsConfig

	// envErrs are environment values BindFlags could not read.
	envErrs []error
}

// CNITokenConfig is the CNI plugin's kubeconfig routed keeps supplied
// with a short-lived token (routed/cnitoken). Off when Kubeconfig is
// empty.
type CNITokenConfig struct {
	Kubeconfig     string // the host's /etc/cni/net.d/routed-kubeconfig as mounted
	ServiceAccount string
	Namespace      string // "" : routed's own (the pod's namespace)
	Validity       time.Duration
	RefreshBefore  time.Duration
	// DaemonSet names routed's DaemonSet (in routed's namespace): when
	// routed stops and it is gone or being deleted, routed removes what
	// it and install-cni put on the host (UninstallPaths). Empty: never.
	DaemonSet string
	// CNIBinDir is the host's CNI bin dir as mounted; CNIConfName the
	// conflist install-cni writes into the kubeconfig's directory.
	CNIBinDir, CNIConfName string
	// LogDir is the host's directory of the CNI plugin's log, as mounted.
	LogDir string
}

// env returns the first set variable of names, else def.
func env(def string, names ...string) string {
	if v, _ := lookupEnv(names...); v != "" {
		return v
	}
	return def
}

// lookupEnv returns the first non-empty variable of names and its name.
func lookupEnv(names ...string) (value, name string) {
	for _, n := range names {
		if v, ok := os.LookupEnv(n); ok && v != "" {
			return v, n
		}
	}
	return "", ""
}

// envBool is the boolean in the first set variable of names, else def;
// a value that is not a boolean is recorded in c.envErrs (Validate
// refuses to start), never silently read as def.
func (c *Config) envBool(def bool, names ...string) bool {
	v, n := lookupEnv(names...)
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		c.envErrs = append(c.envErrs, fmt.Errorf("environment variable %s=%q: want true or false (or 1, 0, t, f)", n, v))
		return def
	}
	return b
}

// envInt is envBool for integers.
func (c *Config) envInt(def int, names ...string) int {
	v, n := lookupEnv(names...)
	if v == "" {
		return def
	}
	i, err := strconv.Atoi(v)
	if err != nil {
		c.envErrs = append(c.envErrs, fmt.Errorf("environment variable %s=%q: want a whole number", n, v))
		return def
	}
	return i
}

// BindFlags registers every flag on fs, with defaults from the
// environment (routed's names first, then Calico's).
func (c *Config) BindFlags(fs *pflag.FlagSet) {
	host, _ := os.Hostname()
	fs.StringVar(&c.Role, "role", env(RoleNode, "ROUTED_ROLE"), "node (felix + BGP + IPAM GC) or route-reflector (BGP only) (env ROUTED_ROLE)")
	fs.StringVar(&c.NodeName, "nodename", env(host, "NODENAME", "ROUTED_NODENAME"), "this node's name, default the hostname (env NODENAME, ROUTED_NODENAME)")
	fs.StringVar(&c.IP, "ip", env("autodetect", "IP"), "node IPv4 address with prefix length, e.g. 10.0.0.5/24, or autodetect (env IP)")
	fs.StringVar(&c.IPMethod, "ip-autodetection-method", env("first-found", "IP_AUTODETECTION_METHOD"), "first-found, interface=REGEX or can-reach=DEST (env IP_AUTODETECTION_METHOD)")
	fs.StringVar(&c.IP6, "ip6", env("none", "IP6"), "node IPv6 address with prefix length, e.g. fd00:10::5/64, autodetect, or none (no IPv6 BGP or IPv6 pod routes) (env IP6)")
	fs.StringVar(&c.IP6Method, "ip6-autodetection-method", env("first-found", "IP6_AUTODETECTION_METHOD"), "first-found, interface=REGEX or can-reach=DEST, for --ip6 autodetect (env IP6_AUTODETECTION_METHOD)")
	c.Datastore.BindFlags(fs)
	fs.StringVar(&c.Pool.CIDR, "default-ipv4-pool-cidr", env("192.168.0.0/16", "ROUTED_IPV4POOL_CIDR", "CALICO_IPV4POOL_CIDR"), "CIDR of the pool created when none exists (env ROUTED_IPV4POOL_CIDR, CALICO_IPV4POOL_CIDR)")
	fs.IntVar(&c.Pool.BlockSize, "default-ipv4-pool-block-size", c.envInt(26, "ROUTED_IPV4POOL_BLOCK_SIZE", "CALICO_IPV4POOL_BLOCK_SIZE"), "block size of the default pool (env ROUTED_IPV4POOL_BLOCK_SIZE, CALICO_IPV4POOL_BLOCK_SIZE)")
	fs.StringVar(&c.Pool.IPIPMode, "default-ipv4-pool-ipip", env("Never", "ROUTED_IPV4POOL_IPIP", "CALICO_IPV4POOL_IPIP"), "ipipMode of the default pool: Never, Always, CrossSubnet (env ROUTED_IPV4POOL_IPIP, CALICO_IPV4POOL_IPIP)")
	fs.StringVar(&c.Pool.VXLANMode, "default-ipv4-pool-vxlan", env("Never", "ROUTED_IPV4POOL_VXLAN", "CALICO_IPV4POOL_VXLAN"), "vxlanMode of the default pool: Never, Always, CrossSubnet; at most one of ipip and vxlan (env ROUTED_IPV4POOL_VXLAN, CALICO_IPV4POOL_VXLAN)")
	fs.BoolVar(&c.Pool.NATOutgoing, "default-ipv4-pool-nat-outgoing", c.envBool(true, "ROUTED_IPV4POOL_NAT_OUTGOING", "CALICO_IPV4POOL_NAT_OUTGOING"), "natOutgoing of the default pool (env ROUTED_IPV4POOL_NAT_OUTGOING, CALICO_IPV4POOL_NAT_OUTGOING)")
	fs.StringVar(&c.Pool.CIDR6, "default-ipv6-pool-cidr", env("", "ROUTED_IPV6POOL_CIDR", "CALICO_IPV6POOL_CIDR"), "CIDR of the IPv6 pool created when no IPv6 pool exists, e.g. fd00:10:244::/48 (empty: none) (env ROUTED_IPV6POOL_CIDR, CALICO_IPV6POOL_CIDR)")
	fs.IntVar(&c.Pool.BlockSize6, "default-ipv6-pool-block-size", c.envInt(122, "ROUTED_IPV6POOL_BLOCK_SIZE", "CALICO_IPV6POOL_BLOCK_SIZE"), "block size of the default IPv6 pool (env ROUTED_IPV6POOL_BLOCK_SIZE, CALICO_IPV6POOL_BLOCK_SIZE)")
	fs.StringVar(&c.Pool.VXLANMode6, "default-ipv6-pool-vxlan", env("Never", "ROUTED_IPV6POOL_VXLAN", "CALICO_IPV6POOL_VXLAN"), "vxlanMode of the default IPv6 pool: Never, Always, CrossSubnet (env ROUTED_IPV6POOL_VXLAN, CALICO_IPV6POOL_VXLAN)")
	fs.BoolVar(&c.Pool.NATOutgoing6, "default-ipv6-pool-nat-outgoing", c.envBool(false, "ROUTED_IPV6POOL_NAT_OUTGOING", "CALICO_IPV6POOL_NAT_OUTGOING"), "natOutgoing of the default IPv6 pool (env ROUTED_IPV6POOL_NAT_OUTGOING, CALICO_IPV6POOL_NAT_OUTGOING)")
	fs.BoolVar(&c.Pool.Disabled, "no-default-ipv4-pool", c.envBool(false, "ROUTED_NO_DEFAULT_IPPOOLS", "NO_DEFAULT_POOLS"), "do not create a default pool (env ROUTED_NO_DEFAULT_IPPOOLS, NO_DEFAULT_POOLS)")
	fs.StringVar(&c.HealthAddr, "health-listen", env(health.DefaultHealthAddr, "ROUTED_HEALTH_LISTEN"), "address for /liveness and /readiness (empty: off; loopback by default: probe with routed health) (env ROUTED_HEALTH_LISTEN)")
	fs.StringVar(&c.MetricsAddr, "metrics-listen", env(health.DefaultMetricsAddr, "ROUTED_METRICS_LISTEN"), "address for Prometheus /metrics (empty: off; give the node IP to let Prometheus scrape it) (env ROUTED_METRICS_LISTEN)")
	fs.StringVar(&c.StatusSocket, "status-socket", env("/var/run/routed/routed.sock", "ROUTED_STATUS_SOCKET"), "unix socket routedctl node status and show talk to (env ROUTED_STATUS_SOCKET)")
	fs.StringVar(&c.CNISocket, "cni-socket", env("", "ROUTED_CNI_SOCKET"), "unix socket on which routed assigns pod addresses and writes their endpoints for routed-cni in one etcd transaction (empty: cni.sock beside --status-socket, "+cniapi.DefaultSocket+" by default; none: off, the plugins then use etcd directly) (env ROUTED_CNI_SOCKET)")
	fs.IntVar(&c.BGPPort, "bgp-port", c.envInt(0, "ROUTED_BGP_PORT"), "BGP listen port (0: BGPConfiguration listenPort, default 179) (env ROUTED_BGP_PORT)")
	fs.StringVar(&c.LogLevel, "log-level", env("info", "ROUTED_LOG_LEVEL", "CALICO_LOG_LEVEL"), "trace, debug, info, warning, error (env ROUTED_LOG_LEVEL, CALICO_LOG_LEVEL)")
	fs.StringVar(&c.StateDir, "state-dir", env("/var/lib/routed", "ROUTED_STATE_DIR"), "where routed writes nodename and mtu for the CNI plugin (env ROUTED_STATE_DIR)")
	fs.DurationVar(&c.FelixResync, "route-refresh-interval", 90*time.Second, "how often felix re-reads the kernel routes")
	fs.DurationVar(&c.IPAMGCPeriod, "ipam-gc-interval", 5*time.Minute, "how often IPAM garbage collection runs (0: never)")
	fs.DurationVar(&c.IPAMGCGrace, "ipam-gc-grace", 10*time.Minute, "how old a leak must be before GC frees it")
	fs.BoolVar(&c.ClusterGC, "cluster-gc", c.envBool(true, "ROUTED_CLUSTER_GC"), "run for the election of the one process that does the cluster-wide GC (endpoints of deleted nodes, leaked addresses, IPAM usage metrics); false when `routed cluster-gc` does it, as deploy/base has it, to keep that pass's memory off the nodes. The node always releases its own empty blocks (env ROUTED_CLUSTER_GC)")
	fs.StringVar(&c.SecretsDir, "bgp-secrets-dir", env("/etc/routed/bgp-secrets", "ROUTED_BGP_SECRETS_DIR"), "mounted secrets for BGPPeer passwords (<name>/<key>) (env ROUTED_BGP_SECRETS_DIR)")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-timeout", 10*time.Second, "how long components get to stop on SIGTERM")
	fs.BoolVar(&c.NodeCondition, "node-condition", c.envBool(true, "ROUTED_NODE_CONDITION"), "in a Kubernetes pod, keep the Node's NetworkUnavailable condition False once the node is in sync, as calico-node does (needs patch on nodes/status); false leaves the condition to another controller (env ROUTED_NODE_CONDITION)")
	fs.BoolVar(&c.DisablePolicy, "disable-policy", c.envBool(false, "ROUTED_DISABLE_POLICY"), "run without network policy enforcement, for kernels without nftables: every pod reaches every pod and CNI ADDs that wait for policy fail (env ROUTED_DISABLE_POLICY)")
	fs.IntVar(&c.PolicyLogGroup, "policy-log-group", c.envInt(100, "ROUTED_POLICY_LOG_GROUP"), "nflog group of the policy Log action and of logged drops, which routed reads for routedctl policy log (0: off) (env ROUTED_POLICY_LOG_GROUP)")
	fs.IntVar(&c.PolicyLogRate, "policy-log-rate", c.envInt(10, "ROUTED_POLICY_LOG_RATE"), "packets a second each logging rule may log, limited in the kernel (env ROUTED_POLICY_LOG_RATE)")
	fs.BoolVar(&c.PolicyLogDrops, "policy-log-drops", c.envBool(false, "ROUTED_POLICY_LOG_DROPS"), "also log packets dropped because no policy or profile allowed them (env ROUTED_POLICY_LOG_DROPS)")
	c.bindFlowsFlags(fs)
	c.bindWireguardFlags(fs)
	c.bindFeedCacheFlag(fs)
	fs.StringVar(&c.CNIToken.Kubeconfig, "cni-kubeconfig", env("", "ROUTED_CNI_KUBECONFIG"), "write the CNI plugin's kubeconfig here with a TokenRequest token and keep it refreshed (empty: off) (env ROUTED_CNI_KUBECONFIG)")
	fs.StringVar(&c.CNIToken.ServiceAccount, "cni-service-account", env(cnitoken.DefaultServiceAccount, "ROUTED_CNI_SERVICE_ACCOUNT"), "the CNI plugin's ServiceAccount (env ROUTED_CNI_SERVICE_ACCOUNT)")
	fs.StringVar(&c.CNIToken.Namespace, "cni-service-account-namespace", env("", "ROUTED_CNI_SERVICE_ACCOUNT_NAMESPACE"), "its namespace (empty: routed's own) (env ROUTED_CNI_SERVICE_ACCOUNT_NAMESPACE)")
	fs.DurationVar(&c.CNIToken.Validity, "cni-token-validity", cnitoken.DefaultValidity, "lifetime of the CNI plugin's token (at least 10m)")
	fs.DurationVar(&c.CNIToken.RefreshBefore, "cni-token-refresh-before", cnitoken.DefaultRefreshBefore, "request a new CNI token once less than this is left of the current one")
	fs.StringVar(&c.CNIToken.DaemonSet, "uninstall-with-daemonset", env("", "ROUTED_DAEMONSET"), "when routed stops and this DaemonSet (routed's own) is gone or being deleted, remove routed's files from the host: CNI plugins, conflist, kubeconfig, state, logs (empty: never) (env ROUTED_DAEMONSET)")
	fs.StringVar(&c.CNIToken.CNIBinDir, "cni-bin-dir", env("/host/opt/cni/bin", "ROUTED_CNI_BIN_DIR"), "the host's CNI bin dir as mounted, for the uninstall (env ROUTED_CNI_BIN_DIR)")
	fs.StringVar(&c.CNIToken.CNIConfName, "cni-conf-name", env("10-routed.conflist", "CNI_CONF_NAME"), "the conflist install-cni writes, for the uninstall (env CNI_CONF_NAME)")
	fs.StringVar(&c.CNIToken.LogDir, "cni-log-dir", env("/var/log/routed", "ROUTED_CNI_LOG_DIR"), "the host's directory of the CNI plugin's log as mounted, for the uninstall (env ROUTED_CNI_LOG_DIR)")
}

// Validate checks the configuration before anything starts.
func (c *Config) Validate() error {
	if err := errors.Join(c.envErrs...); err != nil {
		return err
	}
	if c.Role != RoleNode && c.Role != RoleRouteReflector {
		return fmt.Errorf("--role: %q is not node or route-reflector", c.Role)
	}
	if c.PolicyLogGroup < 0 || c.PolicyLogGroup > 65535 {
		return fmt.Errorf("--policy-log-group: %d is not an nflog group (0-65535)", c.PolicyLogGroup)
	}
	if c.PolicyLogRate < 1 {
		return fmt.Errorf("--policy-log-rate: %d: must be at least 1 packet a second", c.PolicyLogRate)
	}
	if c.PolicyLogDrops && c.PolicyLogGroup == 0 {
		return fmt.Errorf("--policy-log-drops needs --policy-log-group")
	}
	if err := c.validateFlows(); err != nil {
		return err
	}
	if c.NodeName == "" {
		return fmt.Errorf("--nodename: empty and the hostname is unknown; set NODENAME")
	}
	if strings.ContainsAny(c.NodeName, "/ ") || strings.ToLower(c.NodeName) != c.NodeName {
		return fmt.Errorf("--nodename: %q must be a lower-case DNS name", c.NodeName)
	}
	return nil
}

// cniSocket is where the CNI socket is served; "" when it is off.
func (c *Config) cniSocket() string {
	switch c.CNISocket {
	case "none":
		return ""
	case "":
		return filepath.Join(filepath.Dir(c.StatusSocket), filepath.Base(cniapi.DefaultSocket))
	}
	return c.CNISocket
}
