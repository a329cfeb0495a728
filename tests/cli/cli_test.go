// Package cli tests routedctl and `routed etcd` as a user runs them.
package cli

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/routed-net/routed/tests/testbin"
)

// startEtcd runs `routed etcd` on a free port and returns its endpoint.
func startEtcd(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(testbin.Path(t, "routed"), "etcd", "--data-dir", filepath.Join(t.TempDir(), "etcd"), "--listen-client", addr)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "etcd ready at ") {
				ready <- true
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("routed etcd did not become ready in 30s")
	}
	return "http://" + addr
}

// ctl runs routedctl and returns stdout, stderr and the exit code.
func ctl(t *testing.T, endpoint, stdin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testbin.Path(t, "routedctl"), args...)
	cmd.Env = append(os.Environ(), "ETCD_ENDPOINTS="+endpoint)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("routedctl %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

const calicoPool = `apiVersion: projectcalico.org/v3
kind: IPPool
metadata:
  name: default-ipv4-ippool
  uid: 2b1f5d3e-0000-0000-0000-000000000000
spec:
  cidr: 10.244.0.0/16
  ipipMode: CrossSubnet
  natOutgoing: true
  nodeSelector: all()
  allowedUses: [Workload, Tunnel]
`

func TestUserJourney(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)

	out, errOut, code := ctl(t, ep, calicoPool, "apply", "-f", "-")
	if code != 0 || !strings.Contains(out, "Successfully applied 1 resource(s)") {
		t.Fatalf("apply Calico pool: code %d, out %q, err %q", code, out, errOut)
	}
	if !strings.Contains(errOut, "spec.allowedUses") {
		t.Errorf("expected a warning about the ignored Calico field, got %q", errOut)
	}

	out, _, code = ctl(t, ep, "", "get", "ippools", "-o", "yaml")
	for _, want := range []string{"cidr: 10.244.0.0/16", "ipipMode: CrossSubnet", "natOutgoing: true", "blockSize: 26", "name: default-ipv4-ippool"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("get -o yaml: code %d, missing %q in:\n%s", code, want, out)
		}
	}
	// What get prints, apply reads back.
	if _, errOut, code := ctl(t, ep, out, "apply", "-f", "-"); code != 0 {
		t.Fatalf("re-apply of get -o yaml output failed: %s", errOut)
	}

	overlap := "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: other}\nspec: {cidr: 10.244.8.0/24}\n"
	_, errOut, code = ctl(t, ep, overlap, "apply", "-f", "-")
	if code == 0 || !strings.Contains(errOut, "spec.cidr") || !strings.Contains(errOut, `overlaps IPPool "default-ipv4-ippool"`) {
		t.Fatalf("overlapping pool: want a non-zero exit naming spec.cidr and the other pool; code %d, stderr %q", code, errOut)
	}

	out, _, code = ctl(t, ep, "", "get", "ippool")
	if code != 0 || strings.Contains(out, "other") || !strings.Contains(out, "10.244.0.0/16") {
		t.Fatalf("table after rejected apply: code %d:\n%s", code, out)
	}

	if _, errOut, code = ctl(t, ep, "", "delete", "ippool", "default-ipv4-ippool"); code != 0 {
		t.Fatalf("delete: %s", errOut)
	}
	_, errOut, code = ctl(t, ep, "", "get", "ippool", "default-ipv4-ippool")
	if code == 0 || !strings.Contains(errOut, "not found") {
		t.Fatalf("get deleted pool: code %d, stderr %q", code, errOut)
	}
}

func TestErrorsAreClear(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	cases := []struct {
		name  string
		stdin string
		args  []string
		want  []string
	}{
		{"unknown field", "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.1.0.0/16, blockSise: 26}\n",
			[]string{"apply", "-f", "-"}, []string{"unknown field", "spec.blockSise"}},
		{"bad cidr", "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.1.0.0/33}\n",
			[]string{"apply", "-f", "-"}, []string{"spec.cidr", "not a CIDR"}},
		{"vxlan", "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.1.0.0/16, vxlanMode: Always, ipipMode: Always}\n",
			[]string{"apply", "-f", "-"}, []string{"spec.vxlanMode", "one encapsulation"}},
		{"bad asn", "apiVersion: routed.io/v1\nkind: BGPPeer\nmetadata: {name: tor}\nspec: {peerIP: 10.0.0.1, asNumber: 4294967296}\n",
			[]string{"apply", "-f", "-"}, []string{"out of range"}},
		{"create twice", "apiVersion: routed.io/v1\nkind: IPAMConfiguration\nmetadata: {name: default}\nspec: {strictAffinity: true}\n",
			[]string{"create", "-f", "-"}, nil}, // first create succeeds
		{"create exists", "apiVersion: routed.io/v1\nkind: IPAMConfiguration\nmetadata: {name: default}\nspec: {strictAffinity: true}\n",
			[]string{"create", "-f", "-"}, []string{"already exists"}},
		{"replace missing", "apiVersion: routed.io/v1\nkind: Node\nmetadata: {name: ghost}\nspec: {bgp: {ipv4Address: 10.0.0.9/24}}\n",
			[]string{"replace", "-f", "-"}, []string{"not found"}},
		{"unknown kind", "", []string{"get", "frobs"}, []string{"unknown kind"}},
		{"bad output", "", []string{"get", "ippools", "-o", "xml"}, []string{"-o must be"}},
	}
	for _, c := range cases { // sequential: "create exists" depends on "create twice"
		_, errOut, code := ctl(t, ep, c.stdin, c.args...)
		if c.want == nil {
			if code != 0 {
				t.Errorf("%s: unexpected failure: %s", c.name, errOut)
			}
			continue
		}
		if code == 0 {
			t.Errorf("%s: expected failure, got exit 0", c.name)
		}
		for _, w := range c.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%s: stderr %q does not mention %q", c.name, errOut, w)
			}
		}
	}
}

func TestEtcdDownFailsFast(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()                    // nothing listens here now
	testbin.Path(t, "routedctl") // build before timing
	start := time.Now()
	_, errOut, code := ctl(t, dead, "", "get", "nodes")
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("routedctl against a dead etcd took %s; it must fail within a few seconds", took)
	}
	if code == 0 || !strings.Contains(errOut, "etcd unreachable") || !strings.Contains(errOut, dead) {
		t.Fatalf("want a non-zero exit naming the unreachable endpoint; code %d, stderr %q", code, errOut)
	}
}
