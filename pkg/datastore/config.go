package datastore

import "github.com/routed-net/routed/pkg/datastore/dsconfig"

// Config holds how to reach etcd. Zero timeouts take the defaults.
type Config = dsconfig.Config

// Defaults for Config.
const (
	DefaultEndpoint       = dsconfig.DefaultEndpoint
	DefaultDialTimeout    = dsconfig.DefaultDialTimeout
	DefaultRequestTimeout = dsconfig.DefaultRequestTimeout
)

// ConfigFromEnv reads the usual Calico environment names: ETCD_ENDPOINTS
// (comma separated), ETCD_CA_CERT_FILE, ETCD_CERT_FILE, ETCD_KEY_FILE.
func ConfigFromEnv() Config { return dsconfig.ConfigFromEnv() }

// SplitEndpoints splits a comma-separated endpoint list, dropping blanks.
func SplitEndpoints(s string) []string { return dsconfig.SplitEndpoints(s) }
