package status

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// WireGuard paths: GET PathWireguard reads the devices, POST
// PathWireguardRotate makes new keys and publishes them.
const (
	PathWireguard       = "/v1/wireguard"
	PathWireguardRotate = "/v1/wireguard/rotate"
)

// Wireguard is the node's WireGuard encryption as it is now (felix's
// WireguardStatus, as JSON).
type Wireguard struct {
	Enabled    bool `json:"enabled"`
	EnabledV6  bool `json:"enabledV6"`
	AllowClear bool `json:"allowClear"`
	// HostEncryption: traffic between host addresses is encrypted too,
	// per node as HostPeers say.
	HostEncryption bool              `json:"hostEncryption"`
	Devices        []WireguardDevice `json:"devices"`
	HostPeers      []WireguardHost   `json:"hostPeers,omitempty"`
	// HostWarnings say why host encryption is refused for a family, or
	// what it cannot protect against.
	HostWarnings []string        `json:"hostWarnings,omitempty"`
	Held         []WireguardHeld `json:"held,omitempty"`
	Errors       []string        `json:"errors,omitempty"`
}

// WireguardHost is another node as host encryption treats it: host
// traffic to it goes through Device, or in clear for Reason.
type WireguardHost struct {
	Node      string `json:"node"`
	Device    string `json:"device"`
	Encrypted bool   `json:"encrypted"`
	Reason    string `json:"reason,omitempty"`
}

// WireguardDevice is one device (wg.routed, wg-v6.routed).
type WireguardDevice struct {
	Name           string          `json:"name"`
	Implementation string          `json:"implementation"`
	PublicKey      string          `json:"publicKey"`
	ListenPort     int             `json:"listenPort"`
	MTU            int             `json:"mtu"`
	Peers          []WireguardPeer `json:"peers"`
}

// WireguardPeer is one other node on a device.
type WireguardPeer struct {
	Node          string    `json:"node"`
	PublicKey     string    `json:"publicKey"`
	Endpoint      string    `json:"endpoint"`
	AllowedIPs    []string  `json:"allowedIPs"`
	LastHandshake time.Time `json:"lastHandshake"`
	RxBytes       int64     `json:"rxBytes"`
	TxBytes       int64     `json:"txBytes"`
}

// WireguardHeld is a node whose pod traffic is held, and why.
type WireguardHeld struct {
	Node   string `json:"node"`
	Device string `json:"device"`
	Reason string `json:"reason"`
}

// WireguardFuncs answer the WireGuard paths: Read the status, Rotate
// the keys (returning the new public keys).
type WireguardFuncs struct {
	Read   func(context.Context) (*Wireguard, error)
	Rotate func(context.Context) ([2]string, error)
}

// WithWireguard makes the server answer the WireGuard paths (a node's
// routed). Without it they are not served.
func (s *Server) WithWireguard(f WireguardFuncs) *Server {
	s.wireguard = &f
	return s
}

func (s *Server) handleWireguard(mux *http.ServeMux) {
	if s.wireguard == nil {
		return
	}
	mux.HandleFunc("GET "+PathWireguard, func(w http.ResponseWriter, r *http.Request) {
		v, err := s.wireguard.Read(r.Context())
		reply(w, v, err)
	})
	mux.HandleFunc("POST "+PathWireguardRotate, func(w http.ResponseWriter, r *http.Request) {
		keys, err := s.wireguard.Rotate(r.Context())
		reply(w, map[string]string{"publicKey": keys[0], "publicKeyV6": keys[1]}, err)
	})
}

// Wireguard reads the node's WireGuard status; ok is false when the
// node's routed does not serve it (a route reflector, an older routed).
func (c *Client) Wireguard(ctx context.Context) (w *Wireguard, ok bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://routed"+PathWireguard, nil)
	if err != nil {
		return nil, false, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, false, c.dialErr(err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotFound:
		return nil, false, nil
	case http.StatusOK:
	default:
		return nil, true, errorReply(resp)
	}
	w = &Wireguard{}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(w); err != nil {
		return nil, true, fmt.Errorf("status: bad reply: %w", err)
	}
	return w, true, nil
}

// RotateWireguardKeys asks the node's routed for new WireGuard keys and
// returns the new public keys by family ("" for a family that is off).
func (c *Client) RotateWireguardKeys(ctx context.Context) (map[string]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://routed"+PathWireguardRotate, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.dialErr(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, errorReply(resp)
	}
	out := map[string]string{}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&out); err != nil {
		return nil, fmt.Errorf("status: bad reply: %w", err)
	}
	return out, nil
}
