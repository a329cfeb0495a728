package policy_test

import (
	"context"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy/flowlog"
	"github.com/routed-net/routed/felix/policy/internal/polab"
	"golang.org/x/sys/unix"
)

// dialDstOpts connects from pod from to dst:port over TCP with an
// 8-byte Destination Options header (PadN) on every packet, from
// srcPort; ok is whether the server's echo came back.
func (l *lab) dialDstOpts(t *testing.T, from string, dst net.IP, port, srcPort int) (ok bool) {
	t.Helper()
	l.pods[from].Do(t, func() error {
		d := net.Dialer{
			Timeout:   2 * time.Second,
			LocalAddr: &net.TCPAddr{Port: srcPort},
			Control: func(_, _ string, c syscall.RawConn) error {
				var serr error
				err := c.Control(func(fd uintptr) {
					// next header (the kernel sets it), length 0, PadN of 4.
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
			},
		}
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
		n, _ := c.Read(buf)
		ok = n > 0
		return nil
	})
	return ok
}

// dstOptsSent counts, in pod a's namespace, the TCP packets to port
// that left with a Destination Options header (proof that the header
// was on the wire, not stripped).
func dstOptsSent(t *testing.T, l *lab, port int) int {
	t.Helper()
	out, err := exec.Command("nsenter", "--net="+l.pods["a"].Path(), "nft", "list", "chain", "ip6", "ext6probe",
		"out"+strconv.Itoa(port)).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`packets (\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no counter in %s", out)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestLogIPv6DestinationOptions: real IPv6 TCP connections from pod a
// to pod b whose every packet carries a Destination Options header go
// through b's policy as TCP with their port (nftables walks the header),
// and the policy log records them as TCP with that port: the Log rule's
// record for an allowed connection to 8080 and the drop record for one
// to 9090 (before, both were recorded as protocol 60, port 0).
func TestLogIPv6DestinationOptions(t *testing.T) {
	l := newLabWithLog(t, true)
	logs := l.logRecords(t)
	polab.Nft(t, l.pods["a"].NS, `table ip6 ext6probe {
	chain out8080 { type filter hook output priority 0; policy accept; exthdr dst exists tcp dport 8080 counter; }
	chain out9090 { type filter hook output priority 0; policy accept; exthdr dst exists tcp dport 9090 counter; }
}`)
	l.load(gnpOnB("ext6", `[{action: Log, protocol: TCP, destination: {ports: [8080]}}, {action: Allow, protocol: TCP, destination: {ports: [8080]}}]`))
	l.apply()
	a, b := l.pods["a"].IPv6, l.pods["b"].IPv6

	if !l.dialDstOpts(t, "a", b.AsSlice(), 8080, 41239) {
		t.Fatal("TCP to 8080 with destination options: no echo (the policy allows TCP 8080)")
	}
	if n := dstOptsSent(t, l, 8080); n == 0 {
		t.Fatal("no packet to 8080 left pod a with a destination options header")
	}
	r := waitRecord(t, logs, "the Log rule for TCP 8080", func(r flowlog.Record) bool {
		return r.Verdict == "log" && r.Src == a.String() && r.SrcPort == 41239
	})
	if r.Proto != "TCP" || r.DstPort != 8080 || r.Dst != b.String() || r.Policy != "gnp:ext6" || r.Rule != 0 || r.Fragment {
		t.Errorf("Log rule record of a TCP SYN behind destination options: %+v", r)
	}

	if l.dialDstOpts(t, "a", b.AsSlice(), 9090, 41240) {
		t.Fatal("TCP to 9090 with destination options was answered (the policy allows only 8080)")
	}
	if n := dstOptsSent(t, l, 9090); n == 0 {
		t.Fatal("no packet to 9090 left pod a with a destination options header")
	}
	r = waitRecord(t, logs, "the drop of TCP 9090", func(r flowlog.Record) bool {
		return r.Verdict == "drop" && r.Src == a.String() && r.SrcPort == 41240
	})
	if r.Proto != "TCP" || r.DstPort != 9090 || r.Kind != "tier end" || r.Direction != "ingress" {
		t.Errorf("drop record of a TCP SYN behind destination options: %+v", r)
	}
}
