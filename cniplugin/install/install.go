// Package install puts routed's CNI plugins and network configuration on
// a node, as the DaemonSet's init container does with Calico's
// install-cni: settings from the environment (Calico's names), files
// written atomically, and errors that say what to fix.
package install

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/routed-net/routed/cniplugin/fullbin"
	"github.com/routed-net/routed/internal/atomicfile"
	"github.com/routed-net/routed/pkg/datastore"
)

// Config is what the installer does; FromEnv fills it from the
// environment.
type Config struct {
	// SourceDir holds the plugin binaries to install (the image's copy).
	SourceDir string
	// BinDir and NetDir are the host's CNI directories as mounted in the
	// installer's container.
	BinDir, NetDir string
	// HostNetDir is NetDir as the host (kubelet, the plugin) sees it:
	// paths written into the configuration use it.
	HostNetDir string
	ConfName   string
	// Template is the conflist with __PLACEHOLDERS__.
	Template string
	// UpdateBinaries replaces binaries that already exist.
	UpdateBinaries bool
	// SkipBinaries are names not to install.
	SkipBinaries []string
	// Values for the placeholders.
	EtcdEndpoints, MTU, LogLevel, DatastoreType, NodeName string
	// EtcdKeyFile, EtcdCertFile and EtcdCACertFile are the TLS files as
	// mounted in the container; they are copied into the net dir.
	EtcdKeyFile, EtcdCertFile, EtcdCACertFile string
	// KubeHost and KubePort are the API server as the pod sees it
	// (KUBERNETES_SERVICE_HOST/PORT): set means in a cluster, and the
	// plugin is pointed at the kubeconfig routed writes.
	KubeHost, KubePort string
	// ServiceAccountDir may hold a token for the __SERVICEACCOUNT_TOKEN__
	// placeholder of a custom template (Calico's); the shipped template
	// does not use it and the DaemonSet mounts none.
	ServiceAccountDir string
}

// Names of the files written into the net dir.
const (
	KubeconfigName = "routed-kubeconfig"
	TLSDirName     = "routed-tls"
)

// DefaultTemplate is used when neither CNI_NETWORK_CONFIG nor
// CNI_NETWORK_CONFIG_FILE is set. cniVersion 1.0.0: containerd 1.6
// cannot read 1.1.0 results.
const DefaultTemplate = `{
  "name": "k8s-pod-network",
  "cniVersion": "1.0.0",
  "plugins": [
    {
      "type": "routed-cni",
      "log_level": "__LOG_LEVEL__",
      "log_file_path": "/var/log/routed/cni.log",
      "datastore_type": "__DATASTORE_TYPE__",
      "etcd_endpoints": "__ETCD_ENDPOINTS__",
      "etcd_key_file": "__ETCD_KEY_FILE__",
      "etcd_cert_file": "__ETCD_CERT_FILE__",
      "etcd_ca_cert_file": "__ETCD_CA_CERT_FILE__",
      "nodename": "__KUBERNETES_NODE_NAME__",
      "mtu": __CNI_MTU__,
      "ipam": {"type": "routed-ipam"},
      "policy_setup_timeout_seconds": 30,
      "policy": {"type": "k8s"},
      "kubernetes": {"kubeconfig": "__KUBECONFIG_FILEPATH__"},
      "capabilities": {"ips": true}
    },
    {"type": "portmap", "snat": true, "capabilities": {"portMappings": true}},
    {"type": "bandwidth", "capabilities": {"bandwidth": true}}
  ]
}
`

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

// FromEnv reads the configuration from the environment. argv0 locates
// the binaries to install when CNI_SOURCE_DIR is not set.
func FromEnv(argv0 string) (*Config, error) {
	src := os.Getenv("CNI_SOURCE_DIR")
	if src == "" {
		exe, err := os.Executable()
		if err != nil {
			exe = argv0
		}
		src = filepath.Dir(exe)
	}
	secrets := os.Getenv("CNI_ETCD_SECRETS_DIR")
	secret := func(envName, file string) string {
		if v := os.Getenv(envName); v != "" {
			return v
		}
		if secrets != "" {
			if _, err := os.Stat(filepath.Join(secrets, file)); err == nil {
				return filepath.Join(secrets, file)
			}
		}
		return ""
	}
	host, _ := os.Hostname()
	c := &Config{
		SourceDir:         src,
		BinDir:            env("CNI_BIN_DIR", "/host/opt/cni/bin"),
		NetDir:            env("CNI_NET_DIR", "/host/etc/cni/net.d"),
		HostNetDir:        env("HOST_CNI_NET_DIR", "/etc/cni/net.d"),
		ConfName:          env("CNI_CONF_NAME", "10-routed.conflist"),
		UpdateBinaries:    env("UPDATE_CNI_BINARIES", "true") == "true",
		EtcdEndpoints:     env("ETCD_ENDPOINTS", "http://127.0.0.1:2379"),
		MTU:               env("CNI_MTU", "0"),
		LogLevel:          env("LOG_LEVEL", "info"),
		DatastoreType:     env("DATASTORE_TYPE", "etcdv3"),
		NodeName:          env("KUBERNETES_NODE_NAME", host),
		EtcdKeyFile:       secret("ETCD_KEY_FILE", "etcd-key"),
		EtcdCertFile:      secret("ETCD_CERT_FILE", "etcd-cert"),
		EtcdCACertFile:    secret("ETCD_CA_CERT_FILE", "etcd-ca"),
		KubeHost:          os.Getenv("KUBERNETES_SERVICE_HOST"),
		KubePort:          env("KUBERNETES_SERVICE_PORT", "443"),
		ServiceAccountDir: env("SERVICEACCOUNT_DIR", "/var/run/secrets/kubernetes.io/serviceaccount"),
	}
	for _, s := range strings.Split(os.Getenv("SKIP_CNI_BINARIES"), ",") {
		if s = strings.TrimSpace(s); s != "" {
			c.SkipBinaries = append(c.SkipBinaries, s)
		}
	}
	switch {
	case os.Getenv("CNI_NETWORK_CONFIG") != "":
		c.Template = os.Getenv("CNI_NETWORK_CONFIG")
	case os.Getenv("CNI_NETWORK_CONFIG_FILE") != "":
		b, err := os.ReadFile(os.Getenv("CNI_NETWORK_CONFIG_FILE"))
		if err != nil {
			return nil, fmt.Errorf("read CNI_NETWORK_CONFIG_FILE: %w", err)
		}
		c.Template = string(b)
	default:
		c.Template = DefaultTemplate
	}
	return c, nil
}

// Main runs the installer from the environment; it returns the exit code.
func Main(argv0 string) int {
	c, err := FromEnv(argv0)
	if err == nil {
		err = c.Run(os.Stdout)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "routed install: %v\n", err)
		return 1
	}
	return 0
}

// Run installs the binaries, then the TLS files and kubeconfig, then the
// network configuration: the runtime sees the conflist only once
// everything it refers to is in place.
func (c *Config) Run(out *os.File) error {
	say := func(format string, a ...any) { fmt.Fprintf(out, format+"\n", a...) }
	ds := datastore.Config{Endpoints: datastore.SplitEndpoints(c.EtcdEndpoints),
		CertFile: c.EtcdCertFile, KeyFile: c.EtcdKeyFile, CACertFile: c.EtcdCACertFile}
	if err := ds.Validate(); err != nil {
		return fmt.Errorf("ETCD_ENDPOINTS and the etcd TLS files: %w", err)
	}
	if err := c.installBinaries(say); err != nil {
		return err
	}
	repl, err := c.placeholders(say)
	if err != nil {
		return err
	}
	conf := c.Template
	for k, v := range repl {
		conf = strings.ReplaceAll(conf, k, v)
	}
	if !json.Valid([]byte(conf)) {
		var js any
		err := json.Unmarshal([]byte(conf), &js)
		return fmt.Errorf("the network configuration is not valid JSON after substituting placeholders (%v); check CNI_NETWORK_CONFIG/CNI_NETWORK_CONFIG_FILE and values such as CNI_MTU=%q (unquoted in the template, so it must be a number):\n%s", err, c.MTU, conf)
	}
	mode := os.FileMode(0o644)
	if strings.Contains(c.Template, "__SERVICEACCOUNT_TOKEN__") {
		mode = 0o600 // carries a credential
	}
	dst := filepath.Join(c.NetDir, c.ConfName)
	if err := atomicfile.Write(dst, []byte(conf), mode); err != nil {
		return fmt.Errorf("write network configuration: %w (CNI_NET_DIR must be the host's CNI config directory, mounted read-write)", err)
	}
	say("wrote %s", dst)
	return nil
}

// installBinaries copies every executable of SourceDir into BinDir and
// checks that routed's own plugins run there.
func (c *Config) installBinaries(say func(string, ...any)) error {
	if err := os.MkdirAll(c.BinDir, 0o755); err != nil {
		return fmt.Errorf("CNI_BIN_DIR %s is not writable: %w (mount the host's /opt/cni/bin read-write)", c.BinDir, err)
	}
	entries, err := os.ReadDir(c.SourceDir)
	if err != nil {
		return fmt.Errorf("read plugin source directory %s: %w", c.SourceDir, err)
	}
	// Full builds first: a socket-only plugin already in place (an
	// upgrade) must find the one it hands over to at every moment.
	slices.SortStableFunc(entries, func(a, b os.DirEntry) int {
		return cmp.Compare(fullFirst(a.Name()), fullFirst(b.Name()))
	})
	for _, e := range entries {
		name := e.Name()
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 || strings.HasPrefix(name, ".") {
			continue
		}
		if contains(c.SkipBinaries, name) {
			say("skipping %s (SKIP_CNI_BINARIES)", name)
			continue
		}
		dst := filepath.Join(c.BinDir, name)
		if _, err := os.Stat(dst); err == nil && !c.UpdateBinaries {
			say("keeping existing %s (UPDATE_CNI_BINARIES=false)", dst)
			continue
		}
		if err := copyAtomic(filepath.Join(c.SourceDir, name), dst, 0o755); err != nil {
			return fmt.Errorf("install %s: %w (CNI_BIN_DIR must be the host's CNI binary directory, mounted read-write)", name, err)
		}
		say("installed %s", dst)
		if strings.HasPrefix(name, "routed-") {
			if err := verifyPlugin(dst); err != nil {
				return err
			}
		}
	}
	return nil
}

// fullFirst orders full builds (cniplugin/fullbin) before the rest.
func fullFirst(name string) int {
	if strings.HasSuffix(name, fullbin.Suffix) {
		return 0
	}
	return 1
}

// verifyPlugin runs an installed plugin's VERSION command, catching a
// truncated copy or a binary built for another architecture.
func verifyPlugin(path string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path)
	cmd.Env = []string{"CNI_COMMAND=VERSION"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("installed %s does not run: %v %s", path, err, strings.TrimSpace(stderr.String()))
	}
	var v struct {
		Supported []string `json:"supportedVersions"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &v); err != nil || len(v.Supported) == 0 {
		return fmt.Errorf("installed %s answered VERSION with %q, not a CNI version report", path, stdout.String())
	}
	return nil
}

// placeholders computes the template values, writing the etcd TLS
// copies they refer to.
func (c *Config) placeholders(say func(string, ...any)) (map[string]string, error) {
	r := map[string]string{
		"__ETCD_ENDPOINTS__":          c.EtcdEndpoints,
		"__CNI_MTU__":                 c.MTU,
		"__LOG_LEVEL__":               c.LogLevel,
		"__DATASTORE_TYPE__":          c.DatastoreType,
		"__KUBERNETES_NODE_NAME__":    c.NodeName,
		"__KUBECONFIG_FILEPATH__":     "",
		"__SERVICEACCOUNT_TOKEN__":    "",
		"__ETCD_KEY_FILE__":           "",
		"__ETCD_CERT_FILE__":          "",
		"__ETCD_CA_CERT_FILE__":       "",
		"__KUBERNETES_SERVICE_HOST__": c.KubeHost,
		"__KUBERNETES_SERVICE_PORT__": c.KubePort,
	}
	if err := os.MkdirAll(c.NetDir, 0o755); err != nil {
		return nil, fmt.Errorf("CNI_NET_DIR %s is not writable: %w (mount the host's /etc/cni/net.d read-write)", c.NetDir, err)
	}
	tls := []struct{ placeholder, src, name string }{
		{"__ETCD_KEY_FILE__", c.EtcdKeyFile, "etcd-key"},
		{"__ETCD_CERT_FILE__", c.EtcdCertFile, "etcd-cert"},
		{"__ETCD_CA_CERT_FILE__", c.EtcdCACertFile, "etcd-ca"},
	}
	for _, f := range tls {
		if f.src == "" {
			continue
		}
		if err := privateDir(filepath.Join(c.NetDir, TLSDirName)); err != nil {
			return nil, err
		}
		if err := copyAtomic(f.src, filepath.Join(c.NetDir, TLSDirName, f.name), 0o600); err != nil {
			return nil, fmt.Errorf("copy etcd TLS file %s: %w", f.src, err)
		}
		r[f.placeholder] = filepath.Join(c.HostNetDir, TLSDirName, f.name)
		say("copied etcd TLS file to %s", filepath.Join(c.NetDir, TLSDirName, f.name))
	}
	token, err := os.ReadFile(filepath.Join(c.ServiceAccountDir, "token"))
	switch {
	case err == nil:
		r["__SERVICEACCOUNT_TOKEN__"] = strings.TrimSpace(string(token))
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("read service account token: %w", err)
	}
	if c.KubeHost != "" {
		// routed on the node writes this file with a short-lived token
		// of the routed-cni-plugin ServiceAccount and refreshes it
		// (routed/cnitoken); install only points the plugin at it.
		r["__KUBECONFIG_FILEPATH__"] = filepath.Join(c.HostNetDir, KubeconfigName)
	}
	return r, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
