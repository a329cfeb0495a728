package statuscli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/routed/status"
)

type provider struct {
	peers   []status.Peer
	routes  []status.Route
	pending bool   // the sessions not read from the datastore yet
	problem string // why they cannot be (confd)
}

func (p provider) Peers(context.Context) ([]status.Peer, error)   { return p.peers, nil }
func (p provider) Routes(context.Context) ([]status.Route, error) { return p.routes, nil }
func (p provider) Process(context.Context) (status.Process, error) {
	return status.Process{PID: 1, PeersPending: p.pending, ConfigProblem: p.problem}, nil
}

func serve(t *testing.T, p status.Provider) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "routed.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = status.NewServer(sock, p).Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testenv.Eventually(t, 2*time.Second, 10*time.Millisecond, func() string {
		if _, err := status.NewClient(sock).Process(context.Background()); err != nil {
			return fmt.Sprintf("status server did not start: %v", err)
		}
		return ""
	})
	return sock
}

func run(args ...string) (string, error) {
	var out bytes.Buffer
	root := &cobra.Command{Use: "routedctl", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(NewCommands(&out)...)
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&out)
	err := root.Execute()
	return out.String(), err
}

func code(err error) int {
	var e interface{ ExitCode() int }
	if errors.As(err, &e) {
		return e.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

var now = time.Now()

func init() { clock = func() time.Time { return now } }

var peers = []status.Peer{
	{Address: "10.0.0.2", Type: "node-to-node mesh", State: "up", BGPState: "Established", Since: now, Info: "Established",
		PeerASN: 64512, LocalASN: 64512, Received: 1, Accepted: 1, Advertised: 2, MessagesSent: 10, MessagesReceived: 9},
	{Address: "192.0.2.1", Type: "global", State: "start", BGPState: "Active", Since: now,
		Info: "Active: connect: connection refused", PeerASN: 65000},
}

func TestNodeStatus(t *testing.T) {
	sock := serve(t, provider{peers: peers})
	out, err := run("node", "status", "--status-socket", sock)
	if code(err) != ExitSessionDown {
		t.Fatalf("exit code %d (%v), want 2", code(err), err)
	}
	for _, want := range []string{
		"routed process is running.",
		"| PEER ADDRESS |     PEER TYPE     | STATE |  SINCE   |                INFO                 |",
		"| 10.0.0.2     | node-to-node mesh | up    | " + now.Format("15:04:05") + " | Established                         |",
		"| 192.0.2.1    | global            | start | " + now.Format("15:04:05") + " | Active: connect: connection refused |",
		"No IPv6 peers found.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}

	sock = serve(t, provider{peers: peers[:1]})
	t.Setenv(status.EnvSocket, sock) // the environment works as well as the flag
	if out, err := run("node", "status"); err != nil || !strings.Contains(out, "Established") {
		t.Fatalf("all up: %v\n%s", err, out)
	}
}

// TestNodeStatusBeforeSessionsAreRead: at start-up routed serves its
// status before it has read its BGP sessions from the datastore; node
// status then has no session to show and must not say all is well (the
// lab's readiness wait passed in that window once, a restart of 80 ms).
func TestNodeStatusBeforeSessionsAreRead(t *testing.T) {
	sock := serve(t, provider{pending: true})
	out, err := run("node", "status", "--status-socket", sock)
	if code(err) != ExitSessionDown || !strings.Contains(out, "BGP sessions not configured yet") {
		t.Fatalf("sessions not read yet: exit %d (%v), want 2 naming it:\n%s", code(err), err, out)
	}
	// Read, but confd cannot configure BGP: the reason, not "yet".
	sock = serve(t, provider{pending: true, problem: `node "n1" has no BGP address`})
	out, err = run("node", "status", "--status-socket", sock)
	if code(err) != ExitSessionDown || !strings.Contains(out, `BGP sessions not configured: node "n1" has no BGP address.`) || strings.Contains(out, "yet") {
		t.Fatalf("confd's problem: exit %d (%v), want 2 naming it:\n%s", code(err), err, out)
	}
	// A node that has read its sessions and has none is fine.
	sock = serve(t, provider{})
	if out, err := run("node", "status", "--status-socket", sock); err != nil || !strings.Contains(out, "No IPv4 peers found.") {
		t.Fatalf("no sessions configured: exit %d (%v)\n%s", code(err), err, out)
	}
}

func TestNotRunning(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "missing.sock")
	for _, args := range [][]string{{"node", "status"}, {"show", "protocols"}, {"show", "route"}} {
		out, err := run(append(args, "--status-socket", sock)...)
		if code(err) != ExitNotRunning || strings.TrimSpace(out) != "routed process is not running." {
			t.Errorf("%v: exit %d, output %q", args, code(err), out)
		}
	}
}

func TestShowProtocols(t *testing.T) {
	sock := serve(t, provider{peers: peers})
	out, err := run("show", "protocols", "--status-socket", sock)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Name              Proto  State  Since", "Mesh_10_0_0_2     BGP    up", "Global_192_0_2_1  BGP    start",
		"Routes:           1 received, 1 accepted, 2 advertised", "Messages:         10 sent, 9 received",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

func TestShowRoute(t *testing.T) {
	yes, no := true, false
	sock := serve(t, provider{routes: []status.Route{
		{Prefix: "10.65.1.0/26", NextHop: "10.0.0.1", Local: true, Best: true, Since: now.Add(-90 * time.Second)},
		{Prefix: "10.65.2.0/26", NextHop: "10.0.0.2", Peer: "10.0.0.2", Best: true, Since: now.Add(-3 * time.Hour), Programmed: &yes},
		{Prefix: "10.65.3.0/26", NextHop: "10.0.0.3", Peer: "10.0.0.3", Best: true, Since: now, Programmed: &no},
		{Prefix: "0.0.0.0/0", NextHop: "10.0.0.9", Peer: "10.0.0.9", Best: true, Since: now, Programmed: &no,
			Filtered: "cluster-peer-outside-pools: outside every IP pool, from node rogue"},
	}})
	out, err := run("show", "route", "--status-socket", sock)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"10.65.1.0/26  10.0.0.1  local     *     1m30s  -",
		"10.65.2.0/26  10.0.0.2  10.0.0.2  *     3h00m  yes",
		"10.65.3.0/26  10.0.0.3  10.0.0.3  *     0s     no",
		"0.0.0.0/0     10.0.0.9  10.0.0.9  *     0s     filtered: cluster-peer-outside-pools: outside every IP pool, from node rogue",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	out, _ = run("show", "route", "10.65.2.9", "--status-socket", sock)
	if !strings.Contains(out, "10.65.2.0/26") || strings.Contains(out, "10.65.1.0/26") {
		t.Errorf("address filter:\n%s", out)
	}
	out, _ = run("show", "route", "10.65.3.0/26", "--status-socket", sock)
	if strings.Count(out, "\n") != 2 {
		t.Errorf("prefix filter:\n%s", out)
	}
	if _, err := run("show", "route", "nonsense", "--status-socket", sock); err == nil {
		t.Error("bad filter accepted")
	}
}

// TestNodeStatusIPv6: IPv6 sessions get their own table with the same
// columns; a down IPv6 session alone makes the exit code 2.
func TestNodeStatusIPv6(t *testing.T) {
	v6 := []status.Peer{
		{Address: "fd00:10::2", Type: "node-to-node mesh", State: "up", BGPState: "Established", Since: now, Info: "Established"},
		{Address: "fd00:10::99", Type: "global", State: "start", BGPState: "Active", Since: now,
			Info: "Active: no BGP connection yet"},
	}
	sock := serve(t, provider{peers: append(peers[:1:1], v6...)})
	out, err := run("node", "status", "--status-socket", sock)
	if code(err) != ExitSessionDown {
		t.Fatalf("exit code %d (%v), want 2\n%s", code(err), err, out)
	}
	v4At, v6At := strings.Index(out, "IPv4 BGP status"), strings.Index(out, "IPv6 BGP status")
	if v4At < 0 || v6At < v4At {
		t.Fatalf("no IPv4 then IPv6 section:\n%s", out)
	}
	v4Part, v6Part := out[v4At:v6At], out[v6At:]
	for _, want := range []string{
		"| PEER ADDRESS |     PEER TYPE     | STATE |  SINCE   |             INFO              |",
		"| fd00:10::2   | node-to-node mesh | up    | " + now.Format("15:04:05") + " | Established                   |",
		"| fd00:10::99  | global            | start | " + now.Format("15:04:05") + " | Active: no BGP connection yet |",
	} {
		if !strings.Contains(v6Part, want) {
			t.Errorf("missing %q in the IPv6 section of\n%s", want, out)
		}
	}
	if strings.Contains(out, "No IPv6 peers found.") || strings.Contains(v4Part, "fd00") || !strings.Contains(v4Part, "| 10.0.0.2 ") {
		t.Errorf("sessions in the wrong section:\n%s", out)
	}

	sock = serve(t, provider{peers: v6[:1]})
	out, err = run("node", "status", "--status-socket", sock)
	if err != nil || !strings.Contains(out, "No IPv4 peers found.") || !strings.Contains(out, "| fd00:10::2 ") {
		t.Fatalf("IPv6-only node: %v\n%s", err, out)
	}
}

func TestShowRouteIPv6(t *testing.T) {
	yes := true
	sock := serve(t, provider{routes: []status.Route{
		{Prefix: "10.65.1.0/26", NextHop: "10.0.0.1", Local: true, Best: true, Since: now},
		{Prefix: "fd00:10:244::40/122", NextHop: "fd00:10::1", Local: true, Best: true, Since: now},
		{Prefix: "fd00:10:244::80/122", NextHop: "fd00:10::2", Peer: "fd00:10::2", Best: true, Since: now, Programmed: &yes},
	}})
	out, err := run("show", "route", "fd00:10:244::85", "--status-socket", sock)
	if err != nil || !strings.Contains(out, "fd00:10:244::80/122  fd00:10::2  fd00:10::2  *     0s   yes") || strings.Count(out, "\n") != 2 {
		t.Fatalf("IPv6 address filter: %v\n%s", err, out)
	}
	out, _ = run("show", "protocols", "--status-socket", serve(t, provider{peers: []status.Peer{{Address: "fd00:10::2", Type: "node-to-node mesh", State: "up"}}}))
	if !strings.Contains(out, "Mesh_fd00_10__2") {
		t.Fatalf("IPv6 protocol name:\n%s", out)
	}
}
