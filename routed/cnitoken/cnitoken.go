// Package cnitoken keeps the CNI plugin's kubeconfig on the host
// supplied with a short-lived token, as calico-node does for Calico's
// plugin. The plugin runs on the host (kubelet execs it), so it has no
// pod and no projected token of its own; routed, on the same node, asks
// the TokenRequest API for a token of the plugin's ServiceAccount
// (routed-cni-plugin: get pods and namespaces only), writes the
// kubeconfig atomically with mode 0600, and asks again well before the
// token expires. RBAC lets routed-node create tokens for that one
// ServiceAccount and no other.
//
// The token is not bound to routed's pod: it must keep working while
// routed restarts. It expires after Validity (24 h by default) unless
// refreshed, so a node whose routed stays down longer than that stops
// wiring pods that need the API server, rather than holding a credential
// forever.
package cnitoken

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/routed-net/routed/internal/atomicfile"
	"github.com/routed-net/routed/internal/backoff"
	"github.com/sirupsen/logrus"
)

// Defaults, Calico's: a day's token refreshed after a quarter of its
// life, so a node rides out an API server outage of 18 hours.
const (
	DefaultServiceAccount = "routed-cni-plugin"
	DefaultValidity       = 24 * time.Hour
	DefaultRefreshBefore  = 18 * time.Hour
	// MinValidity is the shortest token the API server issues.
	MinValidity = 10 * time.Minute
)

// Errors.
var (
	// ErrConfig: the refresher cannot start as configured.
	ErrConfig = errors.New("cnitoken: configuration")
	// ErrRequest: the API server did not issue a token.
	ErrRequest = errors.New("cnitoken: token request failed")
)

// Config says whose token to request and where to write it.
type Config struct {
	// Client is routed's own access to the API server (routed-node's
	// ServiceAccount), from NewClient.
	Client *Client
	// Namespace and ServiceAccount name the plugin's account.
	Namespace, ServiceAccount string
	// Path is the kubeconfig file as routed sees it (the host's
	// /etc/cni/net.d/routed-kubeconfig, mounted).
	Path string
	// Server is the API server URL the plugin uses; CAFile (re-read on
	// every write, the cluster CA can rotate) or CAData its CA.
	Server string
	CAFile string
	CAData []byte
	// Validity is the lifetime asked for (at least MinValidity).
	Validity time.Duration
	// RefreshBefore: a new token is requested once less than this is
	// left of the current one's life. Must be below Validity.
	RefreshBefore time.Duration
	// MinRetry and MaxRetry bound the backoff after a failed request.
	MinRetry, MaxRetry time.Duration
	// Log receives one line per write and per failure.
	Log logrus.FieldLogger
}

// Token is an issued token and when it expires.
type Token struct {
	Value   string
	Expires time.Time
}

// InCluster returns a Config for routed running in a pod: its own
// identity from the pod's projected service account token, the API
// server and CA the plugin is given from the same place (the service
// address, KUBERNETES_SERVICE_HOST/PORT, which a hostNetwork pod and the
// host share).
func InCluster(path, namespace, serviceAccount string) (Config, error) {
	client, server, err := inClusterClient()
	if err != nil {
		return Config{}, fmt.Errorf("%w: no in-cluster Kubernetes API access (%w): routed-node needs its service account token mounted at %s, or unset ROUTED_CNI_KUBECONFIG", ErrConfig, err, saDir)
	}
	if namespace == "" {
		b, err := os.ReadFile(saNamespaceFn)
		if err != nil {
			return Config{}, fmt.Errorf("%w: namespace of the CNI plugin's ServiceAccount: %w (set ROUTED_CNI_SERVICE_ACCOUNT_NAMESPACE)", ErrConfig, err)
		}
		namespace = string(b)
	}
	return Config{Client: client, Namespace: namespace, ServiceAccount: serviceAccount,
		Path: path, Server: server, CAFile: saCAFile}, nil
}

// Validate fills in the defaults and checks the configuration.
func (c *Config) Validate() error {
	if c.ServiceAccount == "" {
		c.ServiceAccount = DefaultServiceAccount
	}
	if c.Validity == 0 {
		c.Validity = DefaultValidity
	}
	if c.RefreshBefore == 0 {
		c.RefreshBefore = DefaultRefreshBefore
	}
	if c.MinRetry == 0 {
		c.MinRetry = time.Second
	}
	if c.MaxRetry == 0 {
		c.MaxRetry = time.Minute
	}
	if c.Log == nil {
		c.Log = logrus.WithField("component", "cnitoken")
	}
	switch {
	case c.Client == nil || c.Path == "" || c.Server == "" || c.Namespace == "":
		return fmt.Errorf("%w: client, path, server and namespace are required", ErrConfig)
	case c.Validity < MinValidity:
		return fmt.Errorf("%w: token validity %s is below the API server's minimum %s", ErrConfig, c.Validity, MinValidity)
	case c.RefreshBefore >= c.Validity:
		return fmt.Errorf("%w: refresh-before %s must be shorter than the validity %s", ErrConfig, c.RefreshBefore, c.Validity)
	}
	return nil
}

// Request asks the API server for a token of the plugin's account. It
// has no audience (the API server's own) and is bound to no object.
func (c *Config) Request(ctx context.Context) (Token, error) {
	req := map[string]any{
		"apiVersion": "authentication.k8s.io/v1",
		"kind":       "TokenRequest",
		"spec":       map[string]any{"expirationSeconds": int64(c.Validity / time.Second)},
	}
	body, err := c.Client.do(ctx, http.MethodPost, objectPath("", "v1", c.Namespace, "serviceaccounts", c.ServiceAccount)+"/token", nil, req)
	var tr struct {
		Status struct {
			Token               string    `json:"token"`
			ExpirationTimestamp time.Time `json:"expirationTimestamp"`
		} `json:"status"`
	}
	if err == nil {
		if jerr := json.Unmarshal(body, &tr); jerr != nil {
			err = fmt.Errorf("the answer is not a TokenRequest: %v", jerr)
		}
	}
	sa := c.Namespace + "/" + c.ServiceAccount
	switch {
	case statusCode(err) == http.StatusForbidden:
		return Token{}, fmt.Errorf("%w: routed-node may not create tokens for ServiceAccount %s: %w (the Role routed-node-cni-token of deploy/routed.yaml grants create on serviceaccounts/token for it)", ErrRequest, sa, err)
	case statusCode(err) == http.StatusNotFound:
		return Token{}, fmt.Errorf("%w: ServiceAccount %s does not exist: %w (apply deploy/routed.yaml)", ErrRequest, sa, err)
	case err != nil:
		return Token{}, fmt.Errorf("%w: token for ServiceAccount %s: %w", ErrRequest, sa, err)
	case tr.Status.Token == "" || tr.Status.ExpirationTimestamp.IsZero():
		return Token{}, fmt.Errorf("%w: the API server answered the token request for %s without a token or expiry", ErrRequest, sa)
	}
	return Token{Value: tr.Status.Token, Expires: tr.Status.ExpirationTimestamp}, nil
}

// Write replaces the kubeconfig with one holding tok.
func (c *Config) Write(tok Token) error {
	ca := c.CAData
	if c.CAFile != "" {
		b, err := os.ReadFile(c.CAFile)
		if err != nil {
			return fmt.Errorf("%w: read the cluster CA: %w", ErrConfig, err)
		}
		ca = b
	}
	if err := atomicfile.Write(c.Path, Kubeconfig(c.Server, ca, tok.Value), 0o600); err != nil {
		return fmt.Errorf("write the CNI kubeconfig %s: %w (mount the host's /etc/cni/net.d read-write)", c.Path, err)
	}
	return nil
}

// Kubeconfig is the file the plugin reads: one cluster, one user with a
// bearer token.
func Kubeconfig(server string, caPEM []byte, token string) []byte {
	return []byte(fmt.Sprintf(`# Written by routed on this node, which refreshes the token before it
# expires; kubelet's CNI plugin routed-cni reads it.
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: routed-cni-plugin
  user:
    token: %q
contexts:
- name: routed-cni
  context:
    cluster: local
    user: routed-cni-plugin
current-context: routed-cni
`, server, base64.StdEncoding.EncodeToString(caPEM), token))
}

// Run writes the kubeconfig and keeps its token fresh until ctx ends: a
// new token once less than RefreshBefore is left (refreshIn), and after a failure
// a retry with exponential backoff between MinRetry and MaxRetry. The
// old file stays in place while requests fail; its token works until it
// expires. Run returns nil when ctx ends, an error only for a bad Config.
func Run(ctx context.Context, c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	log := c.Log.WithFields(logrus.Fields{"serviceAccount": c.Namespace + "/" + c.ServiceAccount, "path": c.Path})
	failures := backoff.New(c.MinRetry, c.MaxRetry)
	var last Token
	for {
		tok, err := c.Request(ctx)
		if err == nil {
			err = c.Write(tok)
		}
		var wait time.Duration
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			wait = failures.Next()
			f := logrus.Fields{"retryIn": wait}
			if !last.Expires.IsZero() {
				f["currentTokenExpires"] = last.Expires
			}
			log.WithError(err).WithFields(f).Error("could not refresh the CNI plugin's token")
		} else {
			last = tok
			failures.Reset()
			wait = refreshIn(time.Now(), tok.Expires, c.RefreshBefore, c.MinRetry)
			log.WithFields(logrus.Fields{"expires": tok.Expires.UTC().Format(time.RFC3339), "refreshIn": wait.Round(time.Second)}).
				Info("wrote the CNI kubeconfig with a new token")
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// refreshIn is how long to wait before replacing a token that expires
// at exp: until refreshBefore is left, plus up to 10% jitter (the nodes
// of a cluster spread their requests). A server that issued a shorter
// token than refreshBefore (a capped maximum) is asked again after a
// quarter of what it gave, not in a loop; never sooner than floor.
func refreshIn(now, exp time.Time, refreshBefore, floor time.Duration) time.Duration {
	left := exp.Sub(now)
	d := left - refreshBefore
	if d <= 0 {
		d = left / 4
	}
	if d > 0 {
		d += rand.N(d/10 + 1)
	}
	return max(d, floor)
}

// DaemonSetGone reports whether the DaemonSet namespace/name no longer
// exists or is being deleted: routed then stops for good (kubectl delete
// of its manifests), not for a restart or an update.
func (c *Config) DaemonSetGone(ctx context.Context, namespace, name string) (bool, error) {
	raw, err := c.Client.do(ctx, http.MethodGet, objectPath("apps", "v1", namespace, "daemonsets", name), nil, nil)
	if statusCode(err) == http.StatusNotFound {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("cnitoken: get DaemonSet %s/%s: %w", namespace, name, err)
	}
	var ds struct {
		Metadata struct {
			DeletionTimestamp *string `json:"deletionTimestamp"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &ds); err != nil {
		return false, fmt.Errorf("cnitoken: DaemonSet %s/%s: %w", namespace, name, err)
	}
	return ds.Metadata.DeletionTimestamp != nil, nil
}

// WatchDaemonSet reports through deleted when the DaemonSet
// namespace/name is deleted or gets a deletion timestamp, until ctx
// ends. It keeps a watch open from routed's start: `kubectl delete` of
// routed's manifests also deletes the Role that lets routed ask, so by
// the time routed is told to stop it may no longer be allowed to; a
// watch opened earlier still delivers the deletion.
func (c *Config) WatchDaemonSet(ctx context.Context, namespace, name string, deleted func()) {
	failures := backoff.New(c.MinRetry, c.MaxRetry)
	for ctx.Err() == nil {
		rv := ""
		began := time.Now()
		if err := c.watchOnce(ctx, namespace, name, &rv, deleted); err != nil && ctx.Err() == nil {
			c.Log.WithError(err).Debug("DaemonSet watch ended; watching again")
		}
		// A watch that lasted (the API server ends them after minutes)
		// was a success: the next one opens after the floor delay, not the
		// delay earlier failures built up.
		if time.Since(began) > c.MaxRetry {
			failures.Reset()
		}
		failures.Wait(ctx)
	}
}

func (c *Config) watchOnce(ctx context.Context, namespace, name string, rv *string, deleted func()) error {
	q := url.Values{"watch": {"true"}, "fieldSelector": {"metadata.name=" + name}}
	resp, err := c.Client.send(ctx, http.MethodGet, objectPath("apps", "v1", namespace, "daemonsets", ""), q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var ev struct {
			Type   string `json:"type"`
			Object struct {
				Metadata struct {
					DeletionTimestamp *string `json:"deletionTimestamp"`
				} `json:"metadata"`
			} `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			return err
		}
		if ev.Type == "DELETED" || ev.Object.Metadata.DeletionTimestamp != nil {
			deleted()
		}
	}
}
