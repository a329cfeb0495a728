// Package integration runs routed's BGP speaker and confd as they run on
// a node, each in its own network namespace, against a real embedded
// etcd and real BGP peers (other speakers, BIRD 2).
//
// Why child processes: GoBGP creates its sockets from goroutines that
// may run on any OS thread, so a speaker cannot be confined to a
// namespace inside a shared process. Each node is therefore this test
// binary re-executed (TestMain sees ROUTED_BGPTEST_CHILD), forked from a
// thread inside the node's namespace. The parent talks to it over two
// unix sockets (which work across namespaces): routed's real status
// socket, and a small control socket to claim blocks and read the
// routes the fake RouteSink received. etcd runs in the parent on
// loopback; a proxy inside the lab's switch namespace makes it
// reachable from the nodes.
package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/confd"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/feed"
	"github.com/routed-net/routed/routed/bgp"
	"github.com/routed-net/routed/routed/bgp/bgptest"
	"github.com/routed-net/routed/routed/status"
)

const childEnv = "ROUTED_BGPTEST_CHILD"

// childConfig is passed to a node process in childEnv as JSON.
type childConfig struct {
	Node          string
	Etcd          string
	StatusSocket  string
	ControlSocket string
	StateDir      string
	SecretsDir    string
	Blocks        []string
	LogLevel      string
	// IPAM takes affinities and borrowed addresses from the node feed
	// (as the daemon does) instead of Blocks and the control socket.
	IPAM bool
}

func TestMain(m *testing.M) {
	if c := os.Getenv(childEnv); c != "" {
		os.Exit(runChild(c))
	}
	os.Exit(m.Run())
}

// sinkState is what the control socket reports.
type sinkState struct {
	Routes      map[string]string `json:"routes"`
	Withdrawals map[string]int    `json:"withdrawals"`
}

// runChild is a node: speaker + confd + status server, until SIGTERM.
func runChild(raw string) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		return 2
	}
	if l, err := logrus.ParseLevel(cfg.LogLevel); err == nil {
		logrus.SetLevel(l)
	}
	logrus.SetOutput(os.Stderr)
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()

	ds, err := datastore.New(datastore.Config{Endpoints: []string{cfg.Etcd}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "datastore:", err)
		return 2
	}
	sink := bgptest.NewRecorder()
	sp, err := bgp.New(bgp.Config{
		NodeName: cfg.Node, RouteSink: sink, RouteStatus: sink, StateDir: cfg.StateDir,
		ConnectRetry: 2 * time.Second, InitialSyncTimeout: 3 * time.Second,
		Log: logrus.WithFields(logrus.Fields{"component": "bgp", "node": cfg.Node}),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "speaker:", err)
		return 2
	}
	// The daemon's wiring: one node feed, confd and the speaker
	// subscribed to it.
	fd := feed.New(ds, feed.Options{})
	cd := confd.New(sp, cfg.Node, confd.WithSecretsDir(cfg.SecretsDir), confd.WithResyncInterval(time.Second))
	fd.Subscribe("confd", confd.Kinds, cd.Consumer())
	if cfg.IPAM {
		spc := sp.Consumer()
		fd.Subscribe("bgp", spc.SubscribedKinds(), spc)
	} else {
		var aff []bgp.Affinity
		for _, b := range cfg.Blocks {
			aff = append(aff, bgp.Affinity{Node: cfg.Node, CIDR: netip.MustParsePrefix(b), State: bgp.AffinityConfirmed})
		}
		sp.OnAffinitySnapshot(aff)
	}

	spDone := make(chan struct{})
	go func() { defer close(spDone); _ = sp.Run(ctx) }()
	go func() { _ = cd.Run(ctx) }()
	go func() { _ = fd.Run(ctx) }()
	go func() {
		if err := status.NewServer(cfg.StatusSocket, sp).Run(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "status server:", err)
		}
	}()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /sink", func(w http.ResponseWriter, _ *http.Request) {
		st := sinkState{Routes: map[string]string{}, Withdrawals: map[string]int{}}
		for p, nh := range sink.Routes() {
			st.Routes[p.String()] = nh.String()
		}
		for p, n := range sink.Withdrawals() {
			st.Withdrawals[p.String()] = n
		}
		_ = json.NewEncoder(w).Encode(st)
	})
	mux.HandleFunc("POST /affinity", func(w http.ResponseWriter, r *http.Request) {
		p, err := netip.ParsePrefix(r.URL.Query().Get("cidr"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sp.OnAffinityUpdate(bgp.Affinity{Node: cfg.Node, CIDR: p, State: r.URL.Query().Get("state")},
			r.URL.Query().Get("deleted") == "true")
	})
	l, err := net.Listen("unix", cfg.ControlSocket)
	if err != nil {
		fmt.Fprintln(os.Stderr, "control socket:", err)
		return 2
	}
	go func() { _ = http.Serve(l, mux) }()

	<-ctx.Done()
	<-spDone // graceful: sessions stay up until the process exits
	return 0
}

// unixClient returns an HTTP client for a unix socket.
func unixClient(path string) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}
}

// logLevel for the children: ROUTED_TEST_LOG or info (shown only when
// a test fails).
func childLogLevel() string {
	if l := os.Getenv("ROUTED_TEST_LOG"); l != "" {
		return l
	}
	return "info"
}
