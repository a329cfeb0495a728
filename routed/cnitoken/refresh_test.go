package cnitoken

import (
	"testing"
	"time"
)

func TestRefreshIn(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name                string
		left, before, floor time.Duration
		lo, hi              time.Duration
	}{
		{"default day token: after a quarter of its life", 24 * time.Hour, 18 * time.Hour, time.Second, 6 * time.Hour, 6*time.Hour + 36*time.Minute},
		{"short test threshold", 10 * time.Minute, 10*time.Minute - 3*time.Second, time.Second, 3 * time.Second, 3*time.Second + 300*time.Millisecond + 1},
		{"server capped the token below the threshold", time.Hour, 18 * time.Hour, time.Second, 15 * time.Minute, 16*time.Minute + 30*time.Second},
		{"already expired: the floor, not a busy loop", -time.Minute, 18 * time.Hour, 5 * time.Second, 5 * time.Second, 5 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			for range 50 {
				got := refreshIn(now, now.Add(c.left), c.before, c.floor)
				if got < c.lo || got > c.hi {
					t.Fatalf("refreshIn(left %s, before %s) = %s, want in [%s, %s]", c.left, c.before, got, c.lo, c.hi)
				}
			}
		})
	}
}

func TestConfigRejects(t *testing.T) {
	client, err := NewClient(ClientConfig{Server: "https://127.0.0.1:1", CAData: testCA(t), Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	base := func() Config {
		return Config{Client: client, Namespace: "kube-system", Path: "/x", Server: "https://a"}
	}
	for name, mod := range map[string]func(*Config){
		"validity below the API server's minimum": func(c *Config) { c.Validity = 5 * time.Minute },
		"threshold not below the validity":        func(c *Config) { c.Validity, c.RefreshBefore = time.Hour, time.Hour },
		"no path":                                 func(c *Config) { c.Path = "" },
	} {
		c := base()
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	c := base()
	if err := c.Validate(); err != nil || c.Validity != DefaultValidity || c.RefreshBefore != DefaultRefreshBefore || c.ServiceAccount != DefaultServiceAccount {
		t.Errorf("defaults: %v %+v", err, c)
	}
}
