package datastore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/pkg/api"
)

// muteEndpoint returns an http endpoint on loopback that accepts
// connections and never answers: a member that is up but cannot serve
// (an election, a member catching up).
func muteEndpoint(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	return "http://" + ln.Addr().String()
}

// TestRideOutByCause: an etcd that accepts connections but does not
// answer is ridden out for ElectionRideOut, one nobody can connect to for
// UnavailableRideOut only (a node cut off from etcd fails its ADDs fast);
// the mark survives the callers' wrapping.
func TestRideOutByCause(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		ep   string
		want time.Duration
	}{
		{"members answering", muteEndpoint(t), ElectionRideOut},
		{"no member reachable", closedEndpoint(t), UnavailableRideOut},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := connect(t, Config{Endpoints: []string{tt.ep}, RequestTimeout: time.Second})
			_, err := c.Get(context.Background(), api.KindNode, "n1")
			wantErr(t, tt.name, err, ErrUnavailable)
			wrapped := fmt.Errorf("read WorkloadEndpoint x: %w", err)
			if got := rideOut(wrapped); got != tt.want {
				t.Errorf("ride-out after %v: %v, want %v", err, got, tt.want)
			}
		})
	}
	if got := rideOut(errors.New("other")); got != UnavailableRideOut {
		t.Errorf("ride-out of an unmarked error: %v", got)
	}
}

// TestProbeEveryEndpoint: with several members the probe reports each,
// in the configured order, and one member that accepts is enough for the
// longer ride-out.
func TestProbeEveryEndpoint(t *testing.T) {
	t.Parallel()
	eps := []string{closedEndpoint(t), muteEndpoint(t), closedEndpoint(t)}
	c := connect(t, Config{Endpoints: eps, RequestTimeout: time.Second})
	_, err := c.Get(context.Background(), api.KindNode, "n1")
	wantErr(t, "three members, one mute", err, ErrUnavailable)
	if got := rideOut(err); got != ElectionRideOut {
		t.Errorf("ride-out after %v: %v, want %v", err, got, ElectionRideOut)
	}
	msg := err.Error()
	last := -1
	for i, ep := range eps {
		at := strings.Index(msg, ep+": ")
		if at < 0 || at < last {
			t.Fatalf("endpoint %d (%s) not reported in order in %q", i, ep, msg)
		}
		last = at
	}
	if !strings.Contains(msg, eps[1]+": reachable but did not answer") {
		t.Errorf("the mute member should read as reachable: %q", msg)
	}
	if !strings.Contains(msg, eps[0]+": dial tcp") || !strings.Contains(msg, "connection refused") {
		t.Errorf("a closed member should read as refused: %q", msg)
	}
}
