package cli

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// calicoConfdRefused are the inputs of Calico's confd BGP tests that
// routedctl refuses, with what its error must name (the field table in
// pkg/api/calico.go says why).
var calicoConfdRefused = map[string]string{}

// TestCalicoConfdInputsApply applies every file of Calico's confd BGP
// test inputs (confd/testdata/calico-confd, Calico's
// confd/tests/mock_data/calicoctl) with routedctl to a real etcd, each
// into an emptied datastore (a step2 input on top of its step1), and
// reads the BGP peers back. Each applies, or is refused naming the
// field routed cannot honour.
func TestCalicoConfdInputsApply(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	root := filepath.Join("..", "..", "confd", "testdata", "calico-confd")
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "input.yaml" {
			rel, _ := filepath.Rel(root, filepath.Dir(p))
			dirs = append(dirs, rel)
		}
		return err
	})
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no inputs under %s: %v", root, err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	applied, refused := 0, 0
	for _, rel := range dirs {
		t.Run(rel, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := cli.Delete(ctx, "\x00", clientv3.WithFromKey()); err != nil {
				t.Fatalf("empty the datastore: %v", err)
			}
			files := []string{filepath.Join(root, rel, "input.yaml")}
			if base, ok := strings.CutSuffix(rel, "/step2"); ok {
				files = append([]string{filepath.Join(root, base, "input.yaml")}, files...)
			}
			for _, f := range files {
				out, errOut, code := ctl(t, ep, "", "apply", "-f", f)
				if why, ok := calicoConfdRefused[rel]; ok && f == files[len(files)-1] {
					if code == 0 || !strings.Contains(errOut, why) {
						t.Fatalf("want refused naming %q; code %d, stderr %q", why, code, errOut)
					}
					t.Logf("refused: %s", strings.TrimSpace(errOut))
					refused++
					return
				}
				if code != 0 || !strings.Contains(out, "Successfully applied") {
					t.Fatalf("apply %s: code %d, stdout %q, stderr %q", f, code, out, errOut)
				}
				if errOut != "" {
					t.Logf("warnings: %s", strings.TrimSpace(errOut))
				}
			}
			data, _ := os.ReadFile(files[len(files)-1])
			if !strings.Contains(string(data), "kind: BGPPeer") {
				applied++
				return
			}
			out, errOut, code := ctl(t, ep, "", "get", "bgppeers", "-o", "yaml")
			if code != 0 || !strings.Contains(out, "kind: BGPPeer") {
				t.Fatalf("get bgppeers: code %d, stderr %q:\n%s", code, errOut, out)
			}
			// reachableBy is kept, not dropped.
			if strings.Contains(string(data), "reachableBy: 10.224.0.1") && !strings.Contains(out, "reachableBy: 10.224.0.1") {
				t.Errorf("reachableBy was not stored:\n%s", out)
			}
			applied++
		})
	}
	t.Logf("%d of %d Calico confd inputs apply with routedctl, %d refused as expected", applied, len(dirs), refused)
	if !t.Failed() && (refused != len(calicoConfdRefused) || applied != len(dirs)-len(calicoConfdRefused)) {
		t.Errorf("%d applied and %d refused of %d, want all but the %d of calicoConfdRefused applied", applied, refused, len(dirs), len(calicoConfdRefused))
	}
}
