package cni_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/tests/lab"
)

// etcdUnary is the number of unary requests etcd has served so far.
func (n *node) etcdUnary(t testing.TB) (float64, float64) {
	t.Helper()
	c, err := lab.ReadEtcdCounters(context.Background(), n.metricsClient(), n.etcd[0]+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return c.Unary, c.ByMethod["Txn"]
}

// ipamClean fails on any leak or inconsistency `routedctl ipam check`
// would report, with no grace.
func (n *node) ipamClean(t testing.TB) {
	t.Helper()
	c := ipam.New(n.store)
	// routed registers its Node; without one the node's block counts as
	// a deleted node's.
	if _, err := n.store.Apply(context.Background(), &api.Node{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindNode},
		Metadata: api.ObjectMeta{Name: n.name}}); err != nil {
		t.Fatal(err)
	}
	rep, err := c.Check(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Problems() != 0 {
		t.Errorf("ipam check: %d problems: %+v", rep.Problems(), rep)
	}
	probs, err := c.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range probs {
		t.Errorf("ipam verify: %s", p)
	}
}

// TestViaRouted: with routed's CNI service up, an exec'd ADD costs etcd
// one transaction that writes the block, the handle and the
// WorkloadEndpoint (naming the container's MAC and address), and a DEL
// one that removes them; DEL again and an unknown container succeed;
// nothing is left and `ipam check` is clean.
func TestViaRouted(t *testing.T) {
	n := newNode(t)
	n.createPool(t, "via", "10.85.0.0/24", 26)
	n.startDaemon(t)
	l := confList(t, "via-net", "1.1.0", n.routedIPAMConf(nil))

	warm := newPod(t, "warm") // claims the node's block
	n.mustAdd(l, warm.rt())

	p := newPod(t, "web")
	u0, t0 := n.etcdUnary(t)
	res := n.mustAdd(l, p.rt())
	u1, t1 := n.etcdUnary(t)
	t.Logf("ADD via routed: %.0f etcd requests (%.0f txn)", u1-u0, t1-t0)
	if u1-u0 != 1 || t1-t0 != 1 {
		t.Errorf("ADD via routed made %.0f etcd requests (%.0f transactions), want 1 transaction", u1-u0, t1-t0)
	}
	ip := res.IPs[0].Address.IP
	n.checkEndpointWritten(t, p, "via-net", ip)
	if out, err := inPod(warm, "ping", "-c1", "-W2", ip.String()); err != nil {
		t.Errorf("ping from another pod: %v\n%s", err, out)
	}

	u0, t0 = n.etcdUnary(t)
	if err := n.del(l, p.rt()); err != nil {
		t.Fatal(err)
	}
	u1, t1 = n.etcdUnary(t)
	t.Logf("DEL via routed: %.0f etcd requests (%.0f txn)", u1-u0, t1-t0)
	if u1-u0 != 1 || t1-t0 != 1 {
		t.Errorf("DEL via routed made %.0f etcd requests (%.0f transactions), want 1 transaction", u1-u0, t1-t0)
	}
	for i := range 2 {
		if err := n.del(l, p.rt()); err != nil {
			t.Fatalf("DEL again (%d): %v", i, err)
		}
	}
	if err := n.del(l, newPod(t, "never").rt()); err != nil {
		t.Fatalf("DEL of a container never added: %v", err)
	}

	// A failure after routed assigned the address and wrote the endpoint
	// (the container already has an eth0) rolls both back: code 4, and
	// nothing of it stays.
	taken := newPod(t, "taken")
	if err := taken.netns.Do(func(ns.NetNS) error {
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "other0"})
	}); err != nil {
		t.Fatal(err)
	}
	before := n.inUse(t)
	if _, err := n.add(l, taken.rt()); cniCode(err) != 4 {
		t.Fatalf("ADD into a netns that has eth0: %v (code %d), want code 4", err, cniCode(err))
	}
	if after := n.inUse(t); after != before {
		t.Errorf("failed ADD left %d addresses allocated", after-before)
	}
	for _, w := range n.endpoints() {
		if w.Spec.ContainerID == taken.containerID {
			t.Errorf("failed ADD left its endpoint %s", w.Metadata.Name)
		}
	}

	if err := n.del(l, warm.rt()); err != nil {
		t.Fatal(err)
	}
	n.assertCleanRoutedIPAM(t)
	n.ipamClean(t)
}

// TestViaRoutedFallback: without routed (no socket, or a socket nobody
// accepts on, as a crashed routed leaves it), ADD and DEL do the work
// against etcd themselves.
func TestViaRoutedFallback(t *testing.T) {
	n := newNode(t)
	n.createPool(t, "fb", "10.86.0.0/24", 26)
	l := confList(t, "fb-net", "1.1.0", n.routedIPAMConf(nil))
	cycle := func(name string) {
		t.Helper()
		p := newPod(t, name)
		res := n.mustAdd(l, p.rt())
		if len(res.IPs) != 1 || len(n.endpoints()) != 1 {
			t.Fatalf("%s: ADD = %v, %d endpoints", name, res.IPs, len(n.endpoints()))
		}
		if err := n.del(l, p.rt()); err != nil {
			t.Fatalf("%s: DEL: %v", name, err)
		}
		n.assertCleanRoutedIPAM(t)
	}
	cycle("nosocket")

	if err := os.MkdirAll(filepath.Dir(n.cniSocket()), 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: n.cniSocket(), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	cycle("stalesocket")

	// A killed routed leaves its socket behind, too.
	n.startDaemon(t).kill()
	cycle("killed")
}

// TestViaRoutedTakesHostLock: routed assigns under the plugin's own host
// IPAM lock file. While the test holds that lock, an ADD through routed
// does not complete; once it is released, it does.
func TestViaRoutedTakesHostLock(t *testing.T) {
	n := newNode(t)
	n.createPool(t, "lk", "10.87.0.0/24", 26)
	n.startDaemon(t)
	rc := n.routedIPAMConf(nil)
	l := confList(t, "lk-net", "1.1.0", rc)
	f, err := os.OpenFile(rc["ipam_lock_file"].(string), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	p := newPod(t, "locked")
	done := make(chan error, 1)
	go func() { _, err := n.add(l, p.rt()); done <- err }()
	// Wait until the ADD is blocked on the host lock (a waiter on the lock
	// file in /proc/locks), then check it has not completed.
	testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() string {
		select {
		case err := <-done:
			t.Fatalf("ADD completed while the host lock was held elsewhere: %v", err)
		default:
		}
		if w, err := lockWaiters(f); err != nil || len(w) == 0 {
			return fmt.Sprintf("the ADD never waited on the host lock %s: waiters %v (%v)", f.Name(), w, err)
		}
		return ""
	})
	select {
	case err := <-done:
		t.Fatalf("ADD completed while the host lock was held elsewhere: %v", err)
	default:
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ADD after the lock was released: %v\n%s", err, n.logTail())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("ADD still waiting 60 s after the lock was released")
	}
	if err := n.del(l, p.rt()); err != nil {
		t.Fatal(err)
	}
	n.assertCleanRoutedIPAM(t)
}

// lockWaiters returns the pids of the processes blocked in flock on f
// (the "->" lines of /proc/locks for its device and inode).
func lockWaiters(f *os.File) ([]int, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", f.Name(), err)
	}
	locks, err := os.ReadFile("/proc/locks")
	if err != nil {
		return nil, fmt.Errorf("read the kernel's lock table: %w", err)
	}
	id := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	var pids []int
	for _, line := range strings.Split(string(locks), "\n") {
		// "2: -> FLOCK  ADVISORY  WRITE 7194 fe:00:10445251 0 EOF"
		fs := strings.Fields(line)
		if len(fs) < 7 || fs[1] != "->" || fs[2] != "FLOCK" || fs[6] != id {
			continue
		}
		if pid, err := strconv.Atoi(fs[5]); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// TestViaRoutedDaemonRestarts: pods start in parallel (exec'd ADDs, 8 at
// a time) while routed's CNI service is killed, restarted and stopped
// under them, so that ADDs go through routed, fall back mid-way or find
// no socket at all; then they are all deleted the same way. No ADD or
// DEL may fail, every pod gets its own address, and nothing is left:
// `ipam check` is clean.
func TestViaRoutedDaemonRestarts(t *testing.T) {
	n := newNode(t)
	n.createPool(t, "rs", "10.88.0.0/23", 26)
	l := confList(t, "rs-net", "1.1.0", n.routedIPAMConf(nil))
	const workers, rounds = 8, 6
	pods := make([][]*pod, workers)
	for w := range pods {
		for r := range rounds {
			pods[w] = append(pods[w], newPod(t, fmt.Sprintf("rs-%d-%d", w, r)))
		}
	}
	var stopFlap atomic.Bool
	flapDone := make(chan int)
	go func() {
		// Kill, restart, stop gracefully, restart...: routed's life on a
		// node under upgrade or crash loop.
		cycles := 0
		for !stopFlap.Load() {
			d := n.startDaemon(t)
			time.Sleep(time.Duration(300+cycles*137%500) * time.Millisecond) // pacing: routed's uptime in this cycle, varied on purpose
			if cycles%2 == 0 {
				d.kill()
			} else {
				d.stop()
			}
			cycles++
			time.Sleep(time.Duration(50+cycles*53%150) * time.Millisecond) // pacing: routed down between restarts, ADDs find no socket
		}
		flapDone <- cycles
	}()
	run := func(verb string, f func(l *libcni.NetworkConfigList, p *pod) error) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var fails []string
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, p := range pods[w] {
					if err := f(l, p); err != nil {
						mu.Lock()
						fails = append(fails, fmt.Sprintf("%s %s: %v", verb, p.name, err))
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		if len(fails) > 0 {
			t.Errorf("%d of %d %ss failed: %v\n%s", len(fails), workers*rounds, verb, fails, n.logTail())
		}
	}
	ips := map[string]string{}
	var mu sync.Mutex
	run("ADD", func(l *libcni.NetworkConfigList, p *pod) error {
		res, err := n.add(l, p.rt())
		if err != nil {
			return err
		}
		cur, err := current.NewResultFromResult(res)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		ip := cur.IPs[0].Address.IP.String()
		if other, dup := ips[ip]; dup {
			return fmt.Errorf("address %s also given to %s", ip, other)
		}
		ips[ip] = p.name
		return nil
	})
	if got := len(n.endpoints()); got != workers*rounds {
		t.Errorf("%d endpoints after %d ADDs", got, workers*rounds)
	}
	n.ipamClean(t)
	run("DEL", func(l *libcni.NetworkConfigList, p *pod) error { return n.del(l, p.rt()) })
	stopFlap.Store(true)
	t.Logf("routed's CNI service restarted %d times during %d ADDs and DELs", <-flapDone, 2*workers*rounds)
	n.assertCleanRoutedIPAM(t)
	n.ipamClean(t)
	// The log shows both paths were taken.
	b, _ := os.ReadFile(n.logFile)
	for _, path := range []string{"routed assigned the addresses", "doing the ADD against etcd directly"} {
		t.Logf("ADDs logging %q: %d", path, strings.Count(string(b), path))
	}
}
