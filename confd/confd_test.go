package confd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/etcdserver/etcdtest"
	"github.com/routed-net/routed/pkg/feed"
	"github.com/routed-net/routed/routed/bgp"
)

// fakeSpeaker records what confd sets.
type fakeSpeaker struct {
	mu       sync.Mutex
	global   bgp.Global
	peers    []bgp.Peer
	svc      []netip.Prefix
	comms    []bgp.PrefixCommunities
	filters  map[netip.Addr]bgp.PeerFilters
	noExport []netip.Prefix
	setCall  int
}

func newFakeSpeaker() *fakeSpeaker { return &fakeSpeaker{} }

func (f *fakeSpeaker) SetGlobal(g bgp.Global) { f.do(func() { f.global = g }) }
func (f *fakeSpeaker) SetPeers(p []bgp.Peer) {
	f.do(func() { f.peers = p; f.setCall++ })
}
func (f *fakeSpeaker) SetServiceCIDRs(s []netip.Prefix)            { f.do(func() { f.svc = s }) }
func (f *fakeSpeaker) SetFilters(m map[netip.Addr]bgp.PeerFilters) { f.do(func() { f.filters = m }) }
func (f *fakeSpeaker) SetNoExportCIDRs(c []netip.Prefix)           { f.do(func() { f.noExport = c }) }

func (f *fakeSpeaker) SetPrefixCommunities(c []bgp.PrefixCommunities) {
	f.do(func() { f.comms = c })
}

func (f *fakeSpeaker) do(fn func()) {
	f.mu.Lock()
	fn()
	f.mu.Unlock()
}

// waitFor waits 10 s for cond, called with f's lock held.
func (f *fakeSpeaker) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() string {
		f.mu.Lock()
		defer f.mu.Unlock()
		if !cond() {
			return fmt.Sprintf("waiting for %s; peers %v global %+v", what, f.peers, f.global)
		}
		return ""
	})
}

func TestConfdFollowsDatastore(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	ds, err := datastore.New(datastore.Config{Endpoints: srv.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	apply := func(r api.Resource) {
		t.Helper()
		if _, err := ds.Apply(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	apply(node("a", "10.0.0.1/24", 0, ""))
	apply(node("b", "10.0.0.2/24", 0, ""))

	secrets := t.TempDir()
	mustWrite(t, secrets+"/bgp/tor", "pw1")
	sp := newFakeSpeaker()
	cd := New(sp, "a", WithSecretsDir(secrets), WithResyncInterval(200*time.Millisecond))
	fd := feed.New(ds, feed.Options{})
	fd.Subscribe("confd", Kinds, cd.Consumer())
	go func() { _ = fd.Run(ctx) }()
	go func() { _ = cd.Run(ctx) }()

	sp.waitFor(t, "mesh peer b", func() bool {
		return sp.global.RouterID == netip.MustParseAddr("10.0.0.1") && len(sp.peers) == 1 && sp.peers[0].Name == "b"
	})

	apply(node("c", "10.0.0.3/24", 0, ""))
	sp.waitFor(t, "mesh peer c", func() bool { return len(sp.peers) == 2 })

	f := false
	apply(&api.BGPConfiguration{Metadata: api.ObjectMeta{Name: "default"},
		Spec: api.BGPConfigurationSpec{NodeToNodeMeshEnabled: &f, ASNumber: 64600}})
	apply(&api.BGPPeer{Metadata: api.ObjectMeta{Name: "tor"}, Spec: api.BGPPeerSpec{PeerIP: "192.0.2.1", ASNumber: 65000,
		Password: &api.PasswordSource{SecretKeyRef: &api.SecretKeyRef{Name: "bgp", Key: "tor"}}}})
	sp.waitFor(t, "mesh off, tor peer", func() bool {
		return sp.global.ASN == 64600 && len(sp.peers) == 1 && sp.peers[0].Address == netip.MustParseAddr("192.0.2.1") &&
			sp.peers[0].Password == "pw1"
	})

	// A rotated secret is picked up without a datastore change.
	mustWrite(t, secrets+"/bgp/tor", "pw2")
	sp.waitFor(t, "rotated password", func() bool { return len(sp.peers) == 1 && sp.peers[0].Password == "pw2" })

	// Without changes confd does not keep re-sending peers. Each resync
	// (every 200 ms) reads the password file, then decides: after four
	// reads, three resyncs have decided.
	reads := fileReads(t, secrets+"/bgp/tor")
	sp.mu.Lock()
	calls := sp.setCall
	sp.mu.Unlock()
	start := time.Now()
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() string {
		if n := reads(); n < 4 {
			return fmt.Sprintf("confd read the password file %d times since the rotation was taken, want 4 (resyncs every 200 ms)", n)
		}
		return ""
	})
	t.Logf("four reads of the password file (resyncs) in %s", time.Since(start).Round(time.Millisecond))
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.setCall != calls {
		t.Fatalf("SetPeers called %d more times without a change", sp.setCall-calls)
	}
}

// fileReads counts, from now on, the times path is opened for reading
// and closed (inotify's IN_CLOSE_NOWRITE): each of confd's pushes reads a
// peer's password file once, so a test can wait for resyncs to happen.
func fileReads(t *testing.T, path string) func() int {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.InotifyAddWatch(fd, path, unix.IN_CLOSE_NOWRITE); err != nil {
		t.Fatal(err)
	}
	n := 0
	buf := make([]byte, 4096)
	return func() int {
		for {
			k, err := unix.Read(fd, buf)
			if errors.Is(err, unix.EAGAIN) {
				return n
			}
			if err != nil {
				t.Fatalf("inotify on %s: %v", path, err)
			}
			// struct inotify_event: wd, mask, cookie, len, then len bytes of name.
			for off := 0; off+unix.SizeofInotifyEvent <= k; {
				if binary.NativeEndian.Uint32(buf[off+4:])&unix.IN_CLOSE_NOWRITE != 0 {
					n++
				}
				off += unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(buf[off+12:]))
			}
		}
	}
}
