package bgp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/routed/bgp/bgptest"
)

// connCounter counts, from GoBGP's log lines, the connection attempts a
// speaker makes ("try to connect", connectLoop) and the connections it
// accepts and closes at once because its session is past Active
// ("Closed an accepted connection", "accepted conn is closed ..."), and
// the collisions it resolves by BGP Identifier ("collision detected: ...").
type connCounter struct{ dials, refused, collisions atomic.Int64 }

func (c *connCounter) Levels() []logrus.Level { return logrus.AllLevels }

func (c *connCounter) Fire(e *logrus.Entry) error {
	switch e.Message {
	case "try to connect":
		c.dials.Add(1)
	case "Closed an accepted connection", "accepted conn is closed to avoid be blocked":
		c.refused.Add(1)
	default:
		if strings.HasPrefix(e.Message, "collision detected") {
			c.collisions.Add(1)
		}
	}
	return nil
}

type nopFormatter struct{}

func (nopFormatter) Format(*logrus.Entry) ([]byte, error) { return nil, nil }

// collisionPairs is how many pairs TestSimultaneousOpen runs
// (ROUTED_COLLIDE_PAIRS overrides): 40, or 10 with -short (make test's
// pass under -race, which is there for races, beside the full pass).
func collisionPairs() int {
	if n, err := strconv.Atoi(os.Getenv("ROUTED_COLLIDE_PAIRS")); err == nil && n > 0 {
		return n
	}
	if testing.Short() {
		return 10
	}
	return 40
}

// TestSimultaneousOpen: two speakers, both active, add each other at the
// same moment, so that each dials the other while accepting the other's
// connection (RFC 4271 6.8, a connection collision). Every pair must be
// Established on both sides within 3 s, and once it is, neither side may
// dial again: after the first keepalive each side receives, three more
// keepalives (1 s apart) pass with no new connection attempt and no
// connection accepted and refused on either side. Before the collision
// fix in third_party/gobgp (PATCHED.md, the third change) some pairs
// stayed in OpenConfirm for good and others redialled every 1.5-2 s.
// Each speaker's router ID is random, apart from its address; then each
// side holds exactly one established TCP connection to the other, the
// same one, and where either side resolved a collision by BGP
// Identifier, it is the one the higher identifier opened.
func TestSimultaneousOpen(t *testing.T) { runSimultaneousOpen(t, false) }

// TestSimultaneousOpenPassiveDialsOnce is TestSimultaneousOpen between
// two routed nodes as confd configures them: the higher address passive,
// which since PATCHED.md's fourth change dials once, at once, when the
// peer is added, and so collides with the active side's dial.
func TestSimultaneousOpenPassiveDialsOnce(t *testing.T) { runSimultaneousOpen(t, true) }

func runSimultaneousOpen(t *testing.T, passiveSecond bool) {
	const (
		establishBound = 3 * time.Second
		parallel       = 8
	)
	n := collisionPairs()
	results := make([]pairResult, n)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i] = simultaneousOpenPair(t, establishBound, passiveSecond)
		}()
	}
	wg.Wait()

	var stuck, redial, resolved int
	var took []time.Duration
	for i, r := range results {
		if r.resolved {
			resolved++
		}
		if r.err != "" {
			t.Errorf("pair %d: %s", i, r.err)
			if r.took == 0 {
				stuck++
			} else {
				redial++
			}
			continue
		}
		took = append(took, r.took)
	}
	slices.Sort(took)
	if len(took) > 0 {
		t.Logf("%d pairs: established in %v (median) to %v (max)", len(took), took[len(took)/2], took[len(took)-1])
	}
	t.Logf("%d/%d pairs resolved a collision by BGP Identifier", resolved, n)
	t.Logf("%d/%d pairs not established on both sides within %v, %d/%d established but still dialling or refusing after", stuck, n, establishBound, redial, n)
}

// pairResult is one pair's outcome: err is empty when the pair passed;
// took is how long both sides took to be Established, zero if they never
// were; resolved is whether either side resolved a collision by BGP
// Identifier.
type pairResult struct {
	took     time.Duration
	err      string
	resolved bool
}

func simultaneousOpenPair(t *testing.T, bound time.Duration, passiveSecond bool) (r pairResult) {
	// A pair of addresses of its own on loopback, one port for both.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return pairResult{err: err.Error()}
	}
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	base := [3]byte{127, byte(100 + rand.IntN(100)), byte(rand.IntN(250))}
	addr := func(k int) netip.Addr { return netip.AddrFrom4([4]byte{base[0], base[1], base[2], byte(k + 1)}) }
	// Router IDs apart from the addresses, so that the higher address
	// (the passive one with passiveSecond) is not always dominant.
	var rid [2]netip.Addr
	for rid[0] == rid[1] {
		for k := range rid {
			rid[k] = netip.AddrFrom4([4]byte{byte(1 + rand.IntN(223)), byte(rand.IntN(256)), byte(rand.IntN(256)), byte(1 + rand.IntN(254))})
		}
	}
	higher := 0
	if rid[1].Compare(rid[0]) > 0 {
		higher = 1
	}

	// Each speaker in a process of its own (this test binary again,
	// TestSimultaneousOpenChild): GoBGP's servers share package
	// variables, so two in one process race by design, and this test
	// runs under -race too.
	nodes := [2]*collisionChild{}
	for k := range nodes {
		c, err := startCollisionChild(t, addr(k), addr(1-k), rid[k], port, passiveSecond && k == 1)
		if err != nil {
			return pairResult{err: err.Error()}
		}
		defer c.stop()
		nodes[k] = c
	}
	describe := func() string {
		s := ""
		for k, c := range nodes {
			st := c.state()
			s += fmt.Sprintf(" node%d (router ID %s): %s (sent %d, received %d; dials %d, refused %d, collisions %d; TCP established out %d, in %d; sockets %v)",
				k+1, rid[k], st.BGPState, st.Sent, st.Received, st.Dials, st.Refused, st.Collisions, st.Out, st.In, st.Sockets)
		}
		return s
	}
	for _, c := range nodes {
		select {
		case <-c.ready:
		case <-time.After(30 * time.Second):
			return pairResult{err: "speaker did not start:" + describe()}
		}
	}

	t0 := time.Now()
	for _, c := range nodes {
		c.goNow()
	}
	for {
		a, b := nodes[0].state(), nodes[1].state()
		if a.Established && b.Established {
			r.took = time.Since(t0)
			break
		}
		if time.Since(t0) > bound {
			r.err = fmt.Sprintf("not established within %v:%s", bound, describe())
			return r
		}
		time.Sleep(5 * time.Millisecond)
	}

	// The window: from each side's first keepalive after Established to
	// three more.
	received := func(base [2]uint64, more uint64) ([2]uint64, string) {
		deadline := time.Now().Add(10 * time.Second)
		var now [2]uint64
		for {
			done := true
			for k, c := range nodes {
				st := c.state()
				if !st.Established {
					return now, "session dropped:" + describe()
				}
				now[k] = st.Received
				if now[k] < base[k]+more {
					done = false
				}
			}
			if done {
				return now, ""
			}
			if time.Now().After(deadline) {
				return now, "keepalives stopped:" + describe()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var kept [2]uint64
	kept, r.err = received(kept, 0)
	if r.err == "" {
		kept, r.err = received(kept, 1)
	}
	if r.err != "" {
		return r
	}
	var before [2]childState
	for k, c := range nodes {
		before[k] = c.state()
	}
	if _, r.err = received(kept, 3); r.err != "" {
		return r
	}
	for k, c := range nodes {
		st := c.state()
		if d, f := st.Dials-before[k].Dials, st.Refused-before[k].Refused; d != 0 || f != 0 {
			r.err += fmt.Sprintf(" node%d dialled %d times and refused %d connections over three keepalives while Established;", k+1, d, f)
		}
	}
	if r.err != "" {
		r.err += describe()
		return r
	}

	// One connection, the same on both sides; the higher identifier's
	// outgoing one where a collision was resolved. /proc/net/tcp is read
	// in pieces while the other pairs' connections come and go, so one
	// reading can list a socket twice or miss one (seen: the same inode
	// twice, 1 pair in 400 under load): the two must agree within 2 s.
	deadline := time.Now().Add(2 * time.Second)
	for {
		a, b := nodes[0].state(), nodes[1].state()
		r.resolved = a.Collisions > 0 || b.Collisions > 0
		switch {
		case a.Out+a.In != 1 || b.Out+b.In != 1 || a.Out != b.In:
			r.err = "not exactly one established TCP connection between the two:" + describe()
		case r.resolved && nodes[higher].state().Out != 1:
			r.err = fmt.Sprintf("the collision kept the connection node%d (the lower router ID) opened:%s", 2-higher, describe())
		default:
			r.err = ""
		}
		if r.err == "" || time.Now().After(deadline) {
			return r
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// childState is what a TestSimultaneousOpenChild process reports of its
// one peer, a JSON line every 10 ms.
type childState struct {
	Established    bool
	BGPState       string
	Sent, Received uint64
	Dials, Refused int64
	Collisions     int64
	Out, In        int      // established TCP connections to the peer, by who opened them
	Sockets        []string // the pair's TCP sockets: local port>remote port state
}

const collideChildEnv = "ROUTED_COLLIDE_CHILD"

// collisionChild is a speaker in a child process: it starts, says
// "ready", adds its peer when told "go" on stdin and exits when stdin
// closes.
type collisionChild struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	ready chan struct{}
	done  chan struct{}

	mu   sync.Mutex
	last childState
}

func startCollisionChild(t *testing.T, local, remote, routerID netip.Addr, port uint16, passive bool) (*collisionChild, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestSimultaneousOpenChild$", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%s,%d,%t,%s", collideChildEnv, local, remote, port, passive, routerID))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &collisionChild{cmd: cmd, in: in, ready: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		readied := false
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "COLLIDE ")
			if !ok {
				continue
			}
			if line == "ready" {
				if !readied {
					readied = true
					close(c.ready)
				}
				continue
			}
			var st childState
			if json.Unmarshal([]byte(line), &st) == nil {
				c.mu.Lock()
				c.last = st
				c.mu.Unlock()
			}
		}
	}()
	return c, nil
}

func (c *collisionChild) state() childState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

func (c *collisionChild) goNow() { _, _ = io.WriteString(c.in, "go\n") }

func (c *collisionChild) stop() {
	c.in.Close()
	<-c.done
	_ = c.cmd.Wait()
}

// TestSimultaneousOpenChild is one speaker of TestSimultaneousOpen, run
// in a process of its own; it skips unless started by it.
func TestSimultaneousOpenChild(t *testing.T) {
	spec := os.Getenv(collideChildEnv)
	if spec == "" {
		t.Skip("a TestSimultaneousOpen child")
	}
	f := strings.Split(spec, ",")
	if len(f) != 5 {
		t.Fatalf("%s=%q", collideChildEnv, spec)
	}
	local, remote := netip.MustParseAddr(f[0]), netip.MustParseAddr(f[1])
	port, err := strconv.Atoi(f[2])
	if err != nil {
		t.Fatal(err)
	}
	var counter connCounter
	node := newCollisionNode(t, local, netip.MustParseAddr(f[4]), uint16(port), &counter)
	peer := Peer{
		Address: remote, ASN: 64512, Port: uint16(port), Type: PeerTypeMesh, Name: "peer",
		LocalAddress: local,
		Passive:      f[3] == "true",
		HoldTime:     3 * time.Second, KeepaliveTime: time.Second,
	}
	fmt.Println("COLLIDE ready")

	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return
			}
			if l == "go" {
				node.sp.SetPeers([]Peer{peer})
			}
		case <-tick.C:
			st := childState{Dials: counter.dials.Load(), Refused: counter.refused.Load(), Collisions: counter.collisions.Load()}
			ps, _ := node.sp.Peers(context.Background())
			for _, p := range ps {
				if p.Address == remote.String() {
					st.Established, st.BGPState = p.Established(), p.BGPState
					st.Sent, st.Received = p.MessagesSent, p.MessagesReceived
				}
			}
			if st.Established {
				st.Out, st.In, st.Sockets = establishedTCP(t, local, remote, uint16(port))
			}
			b, _ := json.Marshal(st)
			fmt.Printf("COLLIDE %s\n", b)
		}
	}
}

type collisionNode struct {
	sp   *Speaker
	addr netip.Addr
}

// establishedTCP counts the established TCP connections from local to
// remote in /proc/net/tcp: out those local opened (its port is not the
// BGP port), in those remote opened; each socket once (by its ends), and
// all of them listed as local port>remote port and state (hex).
func establishedTCP(t *testing.T, local, remote netip.Addr, port uint16) (out, in int, socks []string) {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	// An IPv4 address in /proc/net/tcp: 8 hex digits of its bytes in
	// host (little-endian) order, then ":" and the port in hex.
	hexAddr := func(a netip.Addr) string {
		b := a.As4()
		return fmt.Sprintf("%02X%02X%02X%02X", b[3], b[2], b[1], b[0])
	}
	l, r := hexAddr(local), hexAddr(remote)
	seen := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		la, lp, _ := strings.Cut(f[1], ":")
		ra, rp, _ := strings.Cut(f[2], ":")
		if la != l || ra != r || seen[f[1]+f[2]] {
			continue
		}
		seen[f[1]+f[2]] = true
		lport, _ := strconv.ParseUint(lp, 16, 16)
		rport, _ := strconv.ParseUint(rp, 16, 16)
		socks = append(socks, fmt.Sprintf("%d>%d %s", lport, rport, f[3]))
		if f[3] != "01" { // 01: TCP_ESTABLISHED
			continue
		}
		switch {
		case uint16(rport) == port && uint16(lport) != port:
			out++
		case uint16(lport) == port:
			in++
		}
	}
	return out, in, socks
}

// newCollisionNode starts a speaker on addr with router ID routerID
// whose GoBGP log lines go to counter only (at debug: GoBGP logs its
// dials there).
func newCollisionNode(t *testing.T, addr, routerID netip.Addr, port uint16, counter *connCounter) *collisionNode {
	logger := logrus.New()
	logger.SetLevel(logrus.DebugLevel)
	logger.SetOutput(io.Discard)
	logger.SetFormatter(nopFormatter{})
	if os.Getenv("ROUTED_COLLIDE_LOG") != "" { // a child's log, to see a failure
		logger.SetOutput(os.Stderr)
		logger.SetFormatter(&logrus.TextFormatter{TimestampFormat: "05.000000", FullTimestamp: true})
	}
	logger.AddHook(counter)
	sink := bgptest.NewRecorder()
	sp := runSpeaker(t, Config{
		NodeName: "node-" + addr.String(), ListenPort: int32(port),
		ListenAddresses: []string{addr.String()}, RouteSink: sink, RouteStatus: sink,
		StateDir: t.TempDir(), ConnectRetry: 2 * time.Second,
		Log: logger.WithField("node", addr.String()),
	}, Global{ASN: 64512, RouterID: routerID})
	return &collisionNode{sp: sp, addr: addr}
}
