package k8spod

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// maxBody bounds what is read of an API answer; a pod or namespace is a
// few kilobytes.
const maxBody = 8 << 20

// Object is the part of a pod or namespace the plugin reads.
type Object struct {
	Metadata struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		UID         string            `json:"uid"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	// Spec holds the few pod fields the endpoint needs.
	Spec struct {
		ServiceAccountName string      `json:"serviceAccountName"`
		Containers         []Container `json:"containers"`
		InitContainers     []Container `json:"initContainers"`
	} `json:"spec"`
}

// Container is the part of a pod's container the endpoint needs: its
// ports, which named ports in policy rules resolve to.
type Container struct {
	Ports []ContainerPort `json:"ports"`
}

// ContainerPort is one port of a container (core/v1 ContainerPort).
type ContainerPort struct {
	Name          string `json:"name"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostPort      int    `json:"hostPort"`
	HostIP        string `json:"hostIP"`
}

// status is the body of an API error answer.
type status struct {
	Message string `json:"message"`
	Reason  string `json:"reason"`
}

// get reads one object, e.g. "/api/v1/namespaces/default/pods/web".
// what names it for messages ("pod default/web").
func (c *client) get(ctx context.Context, path, what string) (*Object, error) {
	u := *c.server
	u.Path = c.server.Path + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: request for %s: %w", ErrConfig, what, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "routed-cni")
	tok, err := c.token()
	if err != nil {
		return nil, err
	}
	switch {
	case tok != "":
		req.Header.Set("Authorization", "Bearer "+tok)
	case c.user != "":
		req.SetBasicAuth(c.user, c.password)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, transportError(err, c.server.Host, what)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("%w: read %s from %s: %w", ErrUnavailable, what, c.server.Host, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, statusError(resp.StatusCode, body, c.server.Host, what)
	}
	var obj Object
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, fmt.Errorf("%w: %s from %s is not a Kubernetes object: %w", ErrAPI, what, c.server.Host, err)
	}
	return &obj, nil
}

// transportError classifies a failed request: a certificate the
// kubeconfig does not trust is a configuration problem, anything else
// (refused, timed out, reset) means the API server is unreachable now.
func transportError(err error, host, what string) error {
	var (
		unknownCA *x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
	)
	if errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid) || errors.As(err, &verify) {
		return fmt.Errorf("%w: get %s: the API server %s presents a certificate the kubeconfig's certificate authority does not verify: %w", ErrConfig, what, host, err)
	}
	return fmt.Errorf("%w: get %s: API server %s unreachable: %w", ErrUnavailable, what, host, unwrapURL(err))
}

// unwrapURL drops net/http's "Get \"https://...\":" prefix, which
// repeats what the message already says.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// statusError turns an API error answer into an error an operator can
// act on: credentials and RBAC are configuration, overload and server
// errors are worth retrying.
func statusError(code int, body []byte, host, what string) error {
	var st status
	_ = json.Unmarshal(body, &st)
	msg := strings.TrimSpace(st.Message)
	if msg == "" {
		msg = strings.TrimSpace(string(body))
		if len(msg) > 200 {
			msg = msg[:200] + "..."
		}
	}
	switch {
	case code == http.StatusUnauthorized:
		return fmt.Errorf("%w: get %s: API server %s rejected the kubeconfig's credentials (401 %s); the token may have expired: routed-node on this node refreshes it, check that it runs and its log (component cnitoken)", ErrConfig, what, host, msg)
	case code == http.StatusForbidden:
		return fmt.Errorf("%w: get %s: forbidden by the API server %s (403 %s); the CNI plugin's ServiceAccount needs get on pods and namespaces (ClusterRole routed-cni-plugin)", ErrConfig, what, host, msg)
	case code == http.StatusNotFound:
		return fmt.Errorf("%w: get %s: not found on the API server %s (404 %s)", ErrNotFound, what, host, msg)
	case code == http.StatusTooManyRequests || code >= 500:
		return fmt.Errorf("%w: get %s: API server %s answered %d (%s)", ErrUnavailable, what, host, code, msg)
	}
	return fmt.Errorf("%w: get %s: API server %s answered %d (%s)", ErrAPI, what, host, code, msg)
}

// podPath and namespacePath are the REST paths of a pod and a
// namespace; the names must have passed validName.
func podPath(namespace, name string) string {
	return "/api/v1/namespaces/" + namespace + "/pods/" + name
}

func namespacePath(name string) string { return "/api/v1/namespaces/" + name }

// validName reports whether s is a DNS-1123 subdomain, the form of pod
// and namespace names; anything else must not reach a URL path.
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
		if !alnum && !(c == '-' || c == '.') {
			return false
		}
		if !alnum && (i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}
