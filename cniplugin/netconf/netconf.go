package netconf

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/routed-net/routed/pkg/datastore/dsconfig"
)

// Default locations; felix writes the MTU file, the node agent the
// nodename file.
const (
	DefaultLogFile      = "/var/log/routed/cni.log"
	DefaultMTUFile      = "/var/lib/routed/mtu"
	DefaultNodenameFile = "/var/lib/routed/nodename"
	DefaultMTU          = 1500
)

// NetConf is the plugin's network configuration. Field names follow
// Calico's CNI plugin, so a Calico conflist with only the plugin types
// changed works unmodified; fields Calico has and routed does not use are
// ignored by the JSON decoder.
type NetConf struct {
	types.NetConf

	DatastoreType  string `json:"datastore_type"`
	EtcdEndpoints  string `json:"etcd_endpoints"`
	EtcdKeyFile    string `json:"etcd_key_file"`
	EtcdCertFile   string `json:"etcd_cert_file"`
	EtcdCACertFile string `json:"etcd_ca_cert_file"`

	LogLevel    string `json:"log_level"`
	LogFilePath string `json:"log_file_path"`
	// Rotation of the log file (Calico's names): size in MB before it is
	// rotated, days and number of rotated files kept. Zero: the defaults.
	LogFileMaxSize  int `json:"log_file_max_size"`
	LogFileMaxAge   int `json:"log_file_max_age"`
	LogFileMaxCount int `json:"log_file_max_count"`

	// MTU of both veth ends; 0 means read MTUFile, else DefaultMTU.
	MTU     int    `json:"mtu"`
	MTUFile string `json:"mtu_file"`

	Nodename     string `json:"nodename"`
	NodenameFile string `json:"nodename_file"`

	Kubernetes struct {
		Kubeconfig string `json:"kubeconfig"`
	} `json:"kubernetes"`
	// Policy is accepted for Calico compatibility; felix enforces policy,
	// so the CNI plugin has nothing to do for it.
	Policy struct {
		Type string `json:"type"`
	} `json:"policy"`

	// PolicySetupTimeoutSeconds (Calico's name): when above 0, ADD
	// returns only once felix has programmed the pod's interface in the
	// policy tables, waiting at most this long, and fails (undoing
	// everything) when it has not. Time while routed is not running on
	// the node (its CNI socket does not accept) does not count; an ADD
	// then waits at most 100 s from its start (plugin/policywait.go).
	// 0 returns at once: the pod's traffic is then dropped until felix
	// programs it.
	PolicySetupTimeoutSeconds int `json:"policy_setup_timeout_seconds"`

	// RoutedSocket is routed's CNI socket on this node (pkg/cniapi):
	// with routed-ipam, ADD and DEL ask routed there first and do the
	// work against etcd themselves only when routed is not serving.
	// Empty: cniapi.DefaultSocket; SocketOff ("none"): never ask.
	RoutedSocket string `json:"routed_socket"`

	RuntimeConfig struct {
		// IPs are fixed addresses requested by the runtime ("ips"
		// capability); the IPAM plugin reads them from the same stdin.
		IPs []string `json:"ips,omitempty"`
	} `json:"runtimeConfig"`
}

// ErrConfig marks configuration problems (CNI code 7).
var ErrConfig = errors.New("routed-cni: invalid network configuration")

// ParseNetConf decodes and checks stdin. Errors wrap ErrConfig.
func ParseNetConf(stdin []byte) (*NetConf, error) {
	conf := &NetConf{}
	if err := json.Unmarshal(stdin, conf); err != nil {
		return nil, fmt.Errorf("%w: cannot decode JSON: %w", ErrConfig, err)
	}
	switch conf.DatastoreType {
	case "", "etcdv3":
	default:
		return nil, fmt.Errorf("%w: datastore_type %q is not supported; routed stores its state in etcd: set datastore_type to \"etcdv3\" (or leave it out) and give etcd_endpoints", ErrConfig, conf.DatastoreType)
	}
	switch conf.Policy.Type {
	case "", "k8s", "none":
	default:
		return nil, fmt.Errorf("%w: policy.type %q is not supported (use \"k8s\" or leave it out)", ErrConfig, conf.Policy.Type)
	}
	if conf.IPAM.Type == "" {
		return nil, fmt.Errorf("%w: ipam.type is required (normally \"routed-ipam\")", ErrConfig)
	}
	if conf.PolicySetupTimeoutSeconds < 0 || conf.PolicySetupTimeoutSeconds > 600 {
		return nil, fmt.Errorf("%w: policy_setup_timeout_seconds %d is out of range (0: do not wait for felix, else 1..600)", ErrConfig, conf.PolicySetupTimeoutSeconds)
	}
	if conf.MTU < 0 || conf.MTU > 65535 {
		return nil, fmt.Errorf("%w: mtu %d is out of range (0 reads %s, else 1..65535)", ErrConfig, conf.MTU, conf.MTUFilePath())
	}
	for _, s := range conf.RuntimeConfig.IPs {
		if _, err := parseAddrOrPrefix(s); err != nil {
			return nil, fmt.Errorf("%w: runtimeConfig.ips: %q is not an IP address", ErrConfig, s)
		}
	}
	if err := conf.checkRoutedSocket(); err != nil {
		return nil, err
	}
	if _, err := conf.DatastoreConfig(); err != nil {
		return nil, err
	}
	return conf, nil
}

// MTUFilePath is the MTU file to read when mtu is 0.
func (c *NetConf) MTUFilePath() string {
	if c.MTUFile != "" {
		return c.MTUFile
	}
	return DefaultMTUFile
}

// EffectiveMTU is the MTU for the veth pair: the configured one, else the
// one felix wrote to the MTU file, else DefaultMTU. A broken MTU file is
// reported through warn and ignored: it must not stop pods starting.
func (c *NetConf) EffectiveMTU(warn func(string, ...any)) int {
	if c.MTU > 0 {
		return c.MTU
	}
	b, err := os.ReadFile(c.MTUFilePath())
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			warn("cannot read MTU file %s: %v; using %d", c.MTUFilePath(), err, DefaultMTU)
		}
		return DefaultMTU
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 68 || n > 65535 {
		warn("MTU file %s holds %q, not an MTU; using %d", c.MTUFilePath(), strings.TrimSpace(string(b)), DefaultMTU)
		return DefaultMTU
	}
	return n
}

// NodeName is the configured node name, else the nodename file's
// contents, else the hostname.
func (c *NetConf) NodeName() (string, error) {
	if c.Nodename != "" {
		return c.Nodename, nil
	}
	file := c.NodenameFile
	if file == "" {
		file = DefaultNodenameFile
	}
	if b, err := os.ReadFile(file); err == nil {
		if s := strings.TrimSpace(string(b)); s != "" {
			return s, nil
		}
	}
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "", fmt.Errorf("%w: no nodename configured, %s missing and hostname unknown (%w)", ErrConfig, file, err)
	}
	return h, nil
}

// K8sArgs are the CNI_ARGS the runtime passes for Kubernetes pods.
type K8sArgs struct {
	Namespace   string
	Pod         string
	InfraID     string
	PodUID      string
	RequestedIP []string // IP=a,b
}

// ParseK8sArgs reads CNI_ARGS ("K=V;K=V"). Unknown keys are ignored
// whatever IgnoreUnknown says: runtimes pass keys for other plugins.
func ParseK8sArgs(s string) (K8sArgs, error) {
	var a K8sArgs
	for _, kv := range strings.Split(s, ";") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return a, fmt.Errorf("%w: CNI_ARGS: %q is not KEY=VALUE", ErrConfig, kv)
		}
		switch k {
		case "K8S_POD_NAMESPACE":
			a.Namespace = v
		case "K8S_POD_NAME":
			a.Pod = v
		case "K8S_POD_INFRA_CONTAINER_ID":
			a.InfraID = v
		case "K8S_POD_UID":
			a.PodUID = v
		case "IP":
			for _, ip := range strings.Split(v, ",") {
				if ip = strings.TrimSpace(ip); ip == "" {
					continue
				}
				if _, err := parseAddrOrPrefix(ip); err != nil {
					return a, fmt.Errorf("%w: CNI_ARGS IP=%q is not an IP address", ErrConfig, ip)
				}
				a.RequestedIP = append(a.RequestedIP, ip)
			}
		}
	}
	return a, nil
}

// parseAddrOrPrefix accepts "10.0.0.5" and "10.0.0.5/24" (host-local's
// form for runtimeConfig.ips) and returns the address.
func parseAddrOrPrefix(s string) (netip.Addr, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr(), nil
	}
	return netip.ParseAddr(s)
}

// DatastoreConfig turns the etcd fields into a dsconfig.Config.
func (c *NetConf) DatastoreConfig() (dsconfig.Config, error) {
	cfg := dsconfig.Config{
		Endpoints:  dsconfig.SplitEndpoints(c.EtcdEndpoints),
		CACertFile: c.EtcdCACertFile,
		CertFile:   c.EtcdCertFile,
		KeyFile:    c.EtcdKeyFile,
	}
	if len(cfg.Endpoints) == 0 {
		return cfg, fmt.Errorf("%w: etcd_endpoints is required (e.g. \"https://10.0.0.1:2379\")", ErrConfig)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("%w: etcd_endpoints/etcd_*_file: %w", ErrConfig, err)
	}
	return cfg, nil
}
