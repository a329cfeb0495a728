package k8spod

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// kubeconfig is the part of a kubeconfig file the plugin understands.
// sigs.k8s.io/yaml converts YAML to JSON first, so the tags are JSON's;
// []byte fields take the base64 the *-data keys hold.
type kubeconfig struct {
	CurrentContext string `json:"current-context"`
	Clusters       []struct {
		Name    string `json:"name"`
		Cluster struct {
			Server                   string `json:"server"`
			CertificateAuthority     string `json:"certificate-authority"`
			CertificateAuthorityData []byte `json:"certificate-authority-data"`
			InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
			TLSServerName            string `json:"tls-server-name"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			Token                 string `json:"token"`
			TokenFile             string `json:"tokenFile"`
			ClientCertificate     string `json:"client-certificate"`
			ClientCertificateData []byte `json:"client-certificate-data"`
			ClientKey             string `json:"client-key"`
			ClientKeyData         []byte `json:"client-key-data"`
			Username              string `json:"username"`
			Password              string `json:"password"`
			// Exec and AuthProvider need client-go's plugin machinery,
			// which routed-cni does not carry: they are refused.
			Exec         any `json:"exec"`
			AuthProvider any `json:"auth-provider"`
		} `json:"user"`
	} `json:"users"`
	Contexts []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	} `json:"contexts"`
}

// client talks to one API server as one user.
type client struct {
	// server is the API server's base URL, without a trailing slash.
	server *url.URL
	http   *http.Client
	// token returns the bearer token for a request ("" for none);
	// tokenFile is re-read on every call so a rotated token is picked up.
	token    func() (string, error)
	user     string // basic auth, when set
	password string
}

// loadKubeconfig reads path and builds a client for its current
// context. Relative file references are resolved against the
// kubeconfig's own directory, as kubectl does. Errors wrap ErrConfig.
func loadKubeconfig(path string, timeout time.Duration) (*client, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: no kubeconfig %s yet: routed-node writes it when it starts on this node (ROUTED_CNI_KUBECONFIG); check that it runs", ErrConfig, path)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: read kubeconfig %s: %w", ErrConfig, path, err)
	}
	var kc kubeconfig
	if err := yaml.Unmarshal(b, &kc); err != nil {
		return nil, fmt.Errorf("%w: kubeconfig %s is not valid YAML: %w", ErrConfig, path, err)
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: kubeconfig %s: %s", ErrConfig, path, fmt.Sprintf(format, a...))
	}
	rel := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(filepath.Dir(path), p)
	}

	// Context: current-context, else the only one there is.
	ctxName := kc.CurrentContext
	if ctxName == "" {
		if len(kc.Contexts) != 1 {
			return nil, bad("no current-context and %d contexts; set current-context", len(kc.Contexts))
		}
		ctxName = kc.Contexts[0].Name
	}
	var clusterName, userName string
	found := false
	for _, c := range kc.Contexts {
		if c.Name == ctxName {
			clusterName, userName, found = c.Context.Cluster, c.Context.User, true
		}
	}
	if !found {
		return nil, bad("current-context %q is not among its contexts", ctxName)
	}

	cl := &client{}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
	found = false
	for _, c := range kc.Clusters {
		if c.Name != clusterName {
			continue
		}
		found = true
		cc := c.Cluster
		u, err := url.Parse(cc.Server)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return nil, bad("cluster %q: server %q is not an http(s) URL", clusterName, cc.Server)
		}
		u.Path = strings.TrimSuffix(u.Path, "/")
		cl.server = u
		tlsConf.InsecureSkipVerify = cc.InsecureSkipTLSVerify
		tlsConf.ServerName = cc.TLSServerName
		ca := cc.CertificateAuthorityData
		if len(ca) == 0 && cc.CertificateAuthority != "" {
			if ca, err = os.ReadFile(rel(cc.CertificateAuthority)); err != nil {
				return nil, bad("cluster %q: read certificate-authority: %v", clusterName, err)
			}
		}
		if len(ca) > 0 {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(ca) {
				return nil, bad("cluster %q: certificate authority holds no PEM certificate", clusterName)
			}
			tlsConf.RootCAs = pool
		}
	}
	if !found {
		return nil, bad("context %q names cluster %q, which is not defined", ctxName, clusterName)
	}

	cl.token = func() (string, error) { return "", nil }
	for _, u := range kc.Users {
		if u.Name != userName {
			continue
		}
		uu := u.User
		if uu.Exec != nil || uu.AuthProvider != nil {
			return nil, bad("user %q: exec and auth-provider credentials are not supported; use a token, tokenFile or a client certificate", userName)
		}
		switch {
		case uu.Token != "":
			tok := uu.Token
			cl.token = func() (string, error) { return tok, nil }
		case uu.TokenFile != "":
			file := rel(uu.TokenFile)
			cl.token = func() (string, error) {
				b, err := os.ReadFile(file)
				if err != nil {
					return "", fmt.Errorf("%w: read tokenFile: %w", ErrConfig, err)
				}
				return strings.TrimSpace(string(b)), nil
			}
		}
		cl.user, cl.password = uu.Username, uu.Password
		cert, key := uu.ClientCertificateData, uu.ClientKeyData
		var err error
		if len(cert) == 0 && uu.ClientCertificate != "" {
			if cert, err = os.ReadFile(rel(uu.ClientCertificate)); err != nil {
				return nil, bad("user %q: read client-certificate: %v", userName, err)
			}
		}
		if len(key) == 0 && uu.ClientKey != "" {
			if key, err = os.ReadFile(rel(uu.ClientKey)); err != nil {
				return nil, bad("user %q: read client-key: %v", userName, err)
			}
		}
		if (len(cert) == 0) != (len(key) == 0) {
			return nil, bad("user %q: a client certificate needs its key and the other way round", userName)
		}
		if len(cert) > 0 {
			pair, err := tls.X509KeyPair(cert, key)
			if err != nil {
				return nil, bad("user %q: client certificate: %v", userName, err)
			}
			tlsConf.Certificates = []tls.Certificate{pair}
		}
	}
	// A user the context names but the file does not define means
	// anonymous access, as in kubectl.

	dialer := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	cl.http = &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           dialer.DialContext,
			TLSClientConfig:       tlsConf,
			TLSHandshakeTimeout:   timeout,
			ResponseHeaderTimeout: timeout,
			ForceAttemptHTTP2:     true,
			MaxIdleConnsPerHost:   2,
		},
	}
	return cl, nil
}
