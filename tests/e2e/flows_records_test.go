package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/routed-net/routed/tests/lab"
)

// flowsLine is one line of a node's flows file (docs/flows.md), read as
// a log shipper reads it: an aggregated flow, or with kind "dropped"
// the records a batch turned away, by reason.
type flowsLine struct {
	Kind    string            `json:"kind"`
	Dropped map[string]uint64 `json:"dropped"`
	Src     struct {
		Addr string `json:"addr"`
	} `json:"src"`
	Dst struct {
		Addr string `json:"addr"`
	} `json:"dst"`
	Proto   string      `json:"proto"`
	DstPort uint16      `json:"dstPort"`
	Verdict string      `json:"verdict"`
	Egress  *flowsTrace `json:"egress"`
	Ingress *flowsTrace `json:"ingress"`
	Started uint64      `json:"started"`
	Denied  uint64      `json:"denied"`
}

// flowsTrace is one direction's trace; only its verdict is read.
type flowsTrace struct {
	Verdict string `json:"verdict"`
}

// traced says the flow's policed directions all name their deciding
// rule.
func (f *flowsLine) traced() bool {
	if f.Egress == nil && f.Ingress == nil {
		return false
	}
	for _, d := range []*flowsTrace{f.Egress, f.Ingress} {
		if d != nil && d.Verdict == "unknown" {
			return false
		}
	}
	return true
}

// flowsTally is what a node's flows file says of the TCP connections
// from one address to another's port.
type flowsTally struct {
	// Started counts the class's connections, Traced those of them
	// whose every direction policed on the node came with its trace
	// (a direction's verdict "unknown" is a connection whose marks the
	// kernel's rate limit held back: conntrack still proves it was
	// allowed), Denied the class's denied attempts.
	Started, Traced, Denied uint64
	// Dropped is every record the node's caps or the kernel turned
	// away in the file's batches (any class).
	Dropped uint64
	// Reasons are Dropped's reasons.
	Reasons map[string]uint64
}

// tallyFlowsFile reads a node's flows file; a missing file is an empty
// tally (routed opens it lazily), a last line still being written is
// left for the next read, and any other line that is not a flow or a
// dropped line is an error naming the file and line.
func tallyFlowsFile(path, src, dst string, port uint16) (flowsTally, error) {
	t := flowsTally{Reasons: map[string]uint64{}}
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return t, nil
	}
	if err != nil {
		return t, fmt.Errorf("flows file: %w", err)
	}
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		data = data[:i+1]
	} else {
		data = nil
	}
	for n, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var f flowsLine
		if err := json.Unmarshal(line, &f); err != nil {
			return t, fmt.Errorf("flows file %s line %d: %w", path, n+1, err)
		}
		switch {
		case f.Kind == "dropped":
			for r, v := range f.Dropped {
				t.Dropped += v
				t.Reasons[r] += v
			}
		case f.Kind != "":
			return t, fmt.Errorf("flows file %s line %d: unknown kind %q", path, n+1, f.Kind)
		case f.Src.Addr == src && f.Dst.Addr == dst && strings.EqualFold(f.Proto, "tcp") && f.DstPort == port:
			t.Started += f.Started
			t.Denied += f.Denied
			if f.traced() {
				t.Traced += f.Started
			}
		}
	}
	return t, nil
}

// dialOnce makes one connection from the pod to a startConnServer
// server and reads its byte.
func dialOnce(from lab.Pod, addr string) error {
	return inNetns(from.NS, func() error {
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = io.ReadFull(c, make([]byte, 1))
		return err
	})
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on
// every Linux architecture Go runs on.
const clockTicks = 100

// procCPU is a process's CPU time so far, user and system, all its
// threads (fields 14 and 15 of /proc/PID/stat).
func procCPU(pid int) (time.Duration, error) {
	if pid <= 0 {
		return 0, fmt.Errorf("cpu time: no process (pid %d)", pid)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("cpu time: %w", err)
	}
	// The command name may hold spaces and parentheses: fields are
	// counted from the last ')', which ends it (field 2).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("cpu time: /proc/%d/stat has no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("cpu time: /proc/%d/stat has %d fields after the command name", pid, len(f))
	}
	var ticks int64
	for _, s := range f[11:13] { // fields 14 (utime) and 15 (stime)
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("cpu time: /proc/%d/stat: %w", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// nodeSysctl reads (value "") or sets a sysctl in a node's namespace.
func nodeSysctl(ctx context.Context, node, key, value string) (string, error) {
	args := []string{"netns", "exec", node, "sysctl", "-n", key}
	if value != "" {
		args = []string{"netns", "exec", node, "sysctl", "-qw", key + "=" + value}
	}
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("sysctl %s on %s: %w: %s", key, node, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// flowMarkRules counts the nflog rules of the given group in a node's
// policy table (the flow verdict marks; -t leaves the sets' elements
// out of the listing).
func flowMarkRules(ctx context.Context, node string, group int) (int, error) {
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", node, "nft", "-t", "list", "table", "ip", "routed-policy").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("nft list table ip routed-policy on %s: %w: %s", node, err, out)
	}
	return len(regexp.MustCompile(fmt.Sprintf(`\blog\b[^\n]*\bgroup %d\b`, group)).FindAllIndex(out, -1)), nil
}

// ruleCounter is a policy rule's kernel packet counter on a node
// (`routedctl policy counters RULE`, read from the kernel when asked).
func ruleCounter(ctx context.Context, l *lab.Lab, node, rule string) (uint64, error) {
	out, err := l.NodeCtl(ctx, node, "policy", "counters", rule)
	if err != nil {
		return 0, fmt.Errorf("%s: policy counters %s: %w: %s", node, rule, err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == rule {
			n, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: policy counters %s: packets %q: %w", node, rule, f[1], err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("%s: policy counters: no rule %s in %q", node, rule, out)
}
