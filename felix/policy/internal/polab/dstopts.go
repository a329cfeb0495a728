package polab

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/internal/nstest"
	"golang.org/x/sys/unix"
)

// DialDstOpts connects from namespace n over TCP to dst:port from
// srcPort with an 8-byte IPv6 Destination Options header (one PadN) on
// every packet, writes a line and reports whether the echo came back
// within 2 s (a drop or a refusal is false; setup errors fail t).
func DialDstOpts(t testing.TB, n *nstest.NS, dst netip.Addr, port, srcPort int) (ok bool) {
	t.Helper()
	control := func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			// next header (the kernel sets it), length 0, PadN of 4 bytes
			opts := string([]byte{0, 0, 1, 4, 0, 0, 0, 0})
			serr = unix.SetsockoptString(int(fd), unix.IPPROTO_IPV6, unix.IPV6_DSTOPTS, opts)
			if serr == nil {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
			}
		})
		if err != nil {
			return err
		}
		return serr
	}
	n.Do(t, func() error {
		d := net.Dialer{LocalAddr: &net.TCPAddr{Port: srcPort}, Control: control}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := d.DialContext(ctx, "tcp6", net.JoinHostPort(dst.String(), strconv.Itoa(port)))
		if err != nil {
			return nil // dropped (timeout) or refused: no echo
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte("ext6\n")); err != nil {
			return nil
		}
		buf := make([]byte, 16)
		got, _ := c.Read(buf)
		ok = got > 0
		return nil
	})
	return ok
}

// CountDstOpts counts, in namespace n, the TCP packets to port that
// leave with a Destination Options header (proof that DialDstOpts put
// the header on the wire); the returned func reads the count.
func CountDstOpts(t testing.TB, n *nstest.NS, port int) func() int {
	t.Helper()
	chain := "out" + strconv.Itoa(port)
	Nft(t, n, "table ip6 dstoptsprobe {\n\tchain "+chain+
		" { type filter hook output priority 0; policy accept; exthdr dst exists tcp dport "+strconv.Itoa(port)+" counter; }\n}\n")
	return func() int {
		t.Helper()
		out, err := exec.Command("nsenter", "--net="+n.Path(), "nft", "list", "chain", "ip6", "dstoptsprobe", chain).CombinedOutput()
		if err != nil {
			t.Fatalf("nft list chain %s in %s: %v\n%s", chain, n.Name, err, out)
		}
		m := regexp.MustCompile(`packets (\d+)`).FindSubmatch(out)
		if m == nil {
			t.Fatalf("no counter in chain %s in %s:\n%s", chain, n.Name, out)
		}
		c, _ := strconv.Atoi(string(m[1]))
		return c
	}
}
