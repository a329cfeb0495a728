package datastore

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestSplitEndpoints(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"http://a:2379", []string{"http://a:2379"}},
		{"http://a:2379,http://b:2379", []string{"http://a:2379", "http://b:2379"}},
		{" http://a:2379 , ,http://b:2379,, ", []string{"http://a:2379", "http://b:2379"}},
		{",,,", nil},
	}
	for _, tt := range tests {
		if got := SplitEndpoints(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("SplitEndpoints(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// The environment tests cannot be parallel: t.Setenv forbids it.

func setEtcdEnv(t *testing.T, endpoints, ca, cert, key string) {
	t.Setenv("ETCD_ENDPOINTS", endpoints)
	t.Setenv("ETCD_CA_CERT_FILE", ca)
	t.Setenv("ETCD_CERT_FILE", cert)
	t.Setenv("ETCD_KEY_FILE", key)
}

func TestConfigFromEnv(t *testing.T) {
	tests := []struct {
		name                    string
		endpoints, ca, crt, key string
		want                    Config
	}{
		{name: "unset", want: Config{}},
		{
			name:      "all set",
			endpoints: "https://10.0.0.1:2379, https://10.0.0.2:2379,",
			ca:        "/etc/etcd/ca.pem", crt: "/etc/etcd/c.pem", key: "/etc/etcd/k.pem",
			want: Config{
				Endpoints:  []string{"https://10.0.0.1:2379", "https://10.0.0.2:2379"},
				CACertFile: "/etc/etcd/ca.pem", CertFile: "/etc/etcd/c.pem", KeyFile: "/etc/etcd/k.pem",
			},
		},
		{name: "blank endpoints", endpoints: " , ", want: Config{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setEtcdEnv(t, tt.endpoints, tt.ca, tt.crt, tt.key)
			if got := ConfigFromEnv(); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ConfigFromEnv() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestBindFlags(t *testing.T) {
	tests := []struct {
		name string
		env  [4]string // endpoints, ca, cert, key
		args []string
		want Config
	}{
		{
			name: "built-in defaults",
			want: Config{Endpoints: []string{DefaultEndpoint}, RequestTimeout: DefaultRequestTimeout},
		},
		{
			name: "environment is the default",
			env:  [4]string{"http://e1:2379,http://e2:2379", "/ca", "/cert", "/key"},
			want: Config{Endpoints: []string{"http://e1:2379", "http://e2:2379"}, CACertFile: "/ca", CertFile: "/cert", KeyFile: "/key", RequestTimeout: DefaultRequestTimeout},
		},
		{
			name: "flags override the environment",
			env:  [4]string{"http://e1:2379", "/ca", "/cert", "/key"},
			args: []string{"--etcd-endpoints=https://f1:2379,https://f2:2379", "--etcd-ca-cert-file=/fca", "--etcd-cert-file=/fcert", "--etcd-key-file=/fkey", "--etcd-timeout=2s"},
			want: Config{Endpoints: []string{"https://f1:2379", "https://f2:2379"}, CACertFile: "/fca", CertFile: "/fcert", KeyFile: "/fkey", RequestTimeout: 2 * time.Second},
		},
		{
			name: "repeated endpoint flag",
			args: []string{"--etcd-endpoints=http://a:1", "--etcd-endpoints=http://b:2"},
			want: Config{Endpoints: []string{"http://a:1", "http://b:2"}, RequestTimeout: DefaultRequestTimeout},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setEtcdEnv(t, tt.env[0], tt.env[1], tt.env[2], tt.env[3])
			var cfg Config
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			cfg.BindFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg, tt.want) {
				t.Fatalf("after BindFlags+Parse(%q): %+v, want %+v", tt.args, cfg, tt.want)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	got := (&Config{}).WithDefaults()
	want := Config{Endpoints: []string{DefaultEndpoint}, DialTimeout: DefaultDialTimeout, RequestTimeout: DefaultRequestTimeout}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("WithDefaults() = %+v, want %+v", got, want)
	}
	cfg := Config{Endpoints: []string{"http://a:1"}, DialTimeout: time.Second, RequestTimeout: 2 * time.Second}
	if got := cfg.WithDefaults(); !reflect.DeepEqual(got, cfg) {
		t.Fatalf("WithDefaults() changed explicit values: %+v", got)
	}
}

// "--etcd-endpoints=a, b" is how people type lists; pflag keeps the blank
// after the comma, which must not make the endpoint invalid.
func TestEndpointFlagWithSpaces(t *testing.T) {
	t.Setenv("ETCD_ENDPOINTS", "")
	var cfg Config
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	cfg.BindFlags(fs)
	if err := fs.Parse([]string{"--etcd-endpoints=http://127.0.0.1:1, http://127.0.0.1:2"}); err != nil {
		t.Fatal(err)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New with %q: %v", cfg.Endpoints, err)
	}
	defer c.Close()
	if got, want := c.Endpoints(), []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Endpoints() = %q, want %q", got, want)
	}
}

// TestTLSFilesNeedHTTPS: TLS files with an http:// endpoint used to run
// in plaintext without a word; now it is a configuration error.
func TestTLSFilesNeedHTTPS(t *testing.T) {
	for _, cfg := range []Config{
		{Endpoints: []string{"http://10.0.0.1:2379"}, CACertFile: "/ca"},
		{Endpoints: []string{"https://10.0.0.1:2379", "http://10.0.0.2:2379"}, CertFile: "/c", KeyFile: "/k"},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "plain http") {
			t.Errorf("%+v: %v, want a configuration error about plain http", cfg, err)
		}
	}
	if err := (Config{Endpoints: []string{"https://10.0.0.1:2379"}, CACertFile: "/ca"}).Validate(); err != nil {
		t.Errorf("https with TLS files: %v", err)
	}
	if err := (Config{Endpoints: []string{"http://10.0.0.1:2379"}}).Validate(); err != nil {
		t.Errorf("plain http without TLS files: %v", err)
	}
}
