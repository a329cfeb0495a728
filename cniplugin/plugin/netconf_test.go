package plugin

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

func TestParseNetConf(t *testing.T) {
	base := `"cniVersion":"1.0.0","name":"n","type":"routed-cni","etcd_endpoints":"http://127.0.0.1:2379","ipam":{"type":"routed-ipam"}`
	ok := []string{
		`{` + base + `}`,
		`{` + base + `,"datastore_type":"etcdv3","policy":{"type":"k8s"},"mtu":1440,"kubernetes":{"kubeconfig":"/x"},"feature_control":{"floating_ips":true}}`,
		`{` + base + `,"runtimeConfig":{"ips":["10.0.0.5","10.0.0.6/24"]}}`,
	}
	for _, s := range ok {
		if _, err := ParseNetConf([]byte(s)); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	bad := map[string]string{
		`{` + base + `,"datastore_type":"kubernetes"}`:                    "datastore_type",
		`{` + base + `,"policy":{"type":"calico"}}`:                       "policy.type",
		`{` + base + `,"mtu":70000}`:                                      "mtu",
		`{` + base + `,"runtimeConfig":{"ips":["nope"]}}`:                 "runtimeConfig.ips",
		`{"cniVersion":"1.0.0","name":"n","etcd_endpoints":"http://e:1"}`: "ipam.type",
		`{"name":"n","ipam":{"type":"x"}}`:                                "etcd_endpoints is required",
		`{"name":"n","ipam":{"type":"x"},"etcd_endpoints":"e:2379"}`:      "must start with http",
		`{` + base + `,"etcd_cert_file":"/c"}`:                            "together",
		`{not json`:                                                       "decode",
	}
	for s, want := range bad {
		_, err := ParseNetConf([]byte(s))
		if !errors.Is(err, errConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want a config error about %q", s, err, want)
		}
	}
}

func TestEffectiveMTU(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mtu")
	c := &NetConf{MTUFile: file}
	var warned []string
	warn := func(f string, a ...any) { warned = append(warned, f) }
	if got := c.EffectiveMTU(warn); got != DefaultMTU || len(warned) != 0 {
		t.Errorf("no file: %d %v", got, warned)
	}
	_ = os.WriteFile(file, []byte("1410\n"), 0o644)
	if got := c.EffectiveMTU(warn); got != 1410 {
		t.Errorf("file: %d", got)
	}
	_ = os.WriteFile(file, []byte("garbage"), 0o644)
	if got := c.EffectiveMTU(warn); got != DefaultMTU || len(warned) != 1 {
		t.Errorf("bad file: %d %v", got, warned)
	}
	c.MTU = 9000
	if got := c.EffectiveMTU(warn); got != 9000 {
		t.Errorf("configured: %d", got)
	}
}

func TestNodeName(t *testing.T) {
	dir := t.TempDir()
	c := &NetConf{NodenameFile: filepath.Join(dir, "nodename")}
	h, _ := os.Hostname()
	if n, _ := c.NodeName(); n != h {
		t.Errorf("fallback %q, want hostname %q", n, h)
	}
	_ = os.WriteFile(c.NodenameFile, []byte("node-7\n"), 0o644)
	if n, _ := c.NodeName(); n != "node-7" {
		t.Errorf("file: %q", n)
	}
	c.Nodename = "explicit"
	if n, _ := c.NodeName(); n != "explicit" {
		t.Errorf("explicit: %q", n)
	}
}

func TestParseK8sArgs(t *testing.T) {
	a, err := ParseK8sArgs("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc;FOO=bar;IP=10.0.0.1,10.0.0.2")
	if err != nil || a.Namespace != "ns" || a.Pod != "web-0" || a.InfraID != "abc" || len(a.RequestedIP) != 2 {
		t.Fatalf("%+v %v", a, err)
	}
	if _, err := ParseK8sArgs("IP=banana"); !errors.Is(err, errConfig) {
		t.Errorf("bad IP: %v", err)
	}
	if _, err := ParseK8sArgs("novalue"); !errors.Is(err, errConfig) {
		t.Errorf("no =: %v", err)
	}
}

func TestErrorCodes(t *testing.T) {
	cases := map[error]uint{
		errConfig:                           types.ErrInvalidNetworkConfig,
		datastore.ErrConfig:                 types.ErrInvalidNetworkConfig,
		api.ErrInvalid:                      types.ErrInvalidNetworkConfig,
		errDatastoreUnavailable:             types.ErrTryAgainLater,
		errInterfaceExists:                  types.ErrInvalidEnvironmentVariables,
		errNetNS:                            types.ErrInvalidNetNS,
		errNotReady:                         types.ErrPluginNotAvailable,
		errors.New("boom"):                  types.ErrInternal,
		types.NewError(11, "ipam down", ""): types.ErrTryAgainLater,
	}
	for err, want := range cases {
		wrapped := errors.Join(errors.New("context"), err)
		got := toCNIError(wrapped).(*types.Error)
		if got.Code != want || !strings.Contains(got.Msg, "context") {
			t.Errorf("%v: code %d msg %q, want %d with context", err, got.Code, got.Msg, want)
		}
	}
}
