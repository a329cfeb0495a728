// Package vm boots a small VM (Debian's 6.1 cloud kernel under qemu,
// busybox initramfs) to test what the CI kernel cannot do: it has no ipip
// module. The VM runs felix's own test binary with ROUTED_IN_VM=1;
// chooseAccel says whether qemu uses KVM or TCG and logs which.
package vm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
)

// cacheDir holds downloaded packages between runs.
func cacheDir() string {
	if d := os.Getenv("ROUTED_TEST_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "routed-test")
	}
	return "/var/cache/routed-test"
}

func run(t *testing.T, ctx context.Context, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// vmTests are felix's tests that need the VM's kernel (ipip).
var vmTests = []string{"TestIPIPInVM", "TestIPIPVXLANSwitchInVM", "TestEncapThroughputInVM", "TestWireguardThroughputInVM", "TestWireguardHostEncryptionInVM", "TestWireguardRebootInVM"}

// TestIPIPInVM builds felix's tests as a static binary, boots it in a VM
// with veth, ipip and vxlan loaded (and iperf3) and runs vmTests there.
func TestIPIPInVM(t *testing.T) {
	testenv.RequireRoot(t, "apt-get, network namespaces")
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	bin, work := buildTests(t, ctx, "./felix")
	a := chooseAccel(t, 1, 9*time.Minute, 4*time.Minute)
	start := time.Now()
	// vxlan too: felix's TestIPIPVXLANSwitchInVM switches a pool between them.
	// iperf3 for felix's TestEncapThroughputInVM (plain, IPIP, VXLAN).
	// nf_tables for TestWireguardHostEncryptionInVM (its incoming mark).
	out := bootTests(t, ctx, a, bin, work, []string{"VM_MODULES=vxlan wireguard nf_tables", "VM_DYNBINS=/usr/bin/iperf3"},
		"felix", vmTests, "-test.v", "-test.run", "^("+strings.Join(vmTests, "|")+")$", "-test.timeout", guestTimeout(a).String())
	t.Logf("built and ran in %v", time.Since(start).Round(time.Millisecond))
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "ROUTED-VM") || strings.Contains(line, "--- ") || strings.Contains(line, "PASS") || strings.Contains(line, "converged") || strings.Contains(line, "ENCAP-THROUGHPUT") || strings.Contains(line, "WIREGUARD-THROUGHPUT") {
			t.Log(strings.TrimSpace(line))
		}
	}
}

// bootTests boots a test binary in a VM (build-initramfs.sh's settings
// in env, the binary's arguments in args), fails the test unless the
// binary exited 0 and each of mustPass passed, and returns the serial
// console's output. what names the package in failures.
func bootTests(t *testing.T, ctx context.Context, a accel, bin, work string, env []string, what string, mustPass []string, args ...string) string {
	t.Helper()
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	run(t, ctx, here, env, "sh", append([]string{"build-initramfs.sh", cacheDir(), bin, work}, args...)...)
	out, dur, err := boot(t, ctx, work, a, "1024")
	t.Logf("VM ran for %v (-accel %s -smp %d, host load %s)", dur.Round(time.Millisecond), a.Name, a.SMP, loadAvg())
	m := regexp.MustCompile(`ROUTED-VM-EXIT (\d+)`).FindStringSubmatch(out)
	switch {
	case m == nil:
		t.Fatalf("the VM did not report a result within %v under -accel %s (qemu: %v); serial console (tail):\n%s", a.Limit.Round(time.Second), a.Name, err, tail(out, 300))
	case m[1] != "0":
		t.Fatalf("%s's tests failed in the VM (exit %s, -accel %s); serial console (tail):\n%s", what, m[1], a.Name, tail(out, 300))
	}
	for _, name := range mustPass {
		if !strings.Contains(out, "--- PASS: "+name) {
			t.Fatalf("%s's %s did not pass in the VM; serial console (tail):\n%s", what, name, tail(out, 300))
		}
	}
	return out
}

// buildTests installs what the VM needs and builds a package's tests as
// a static binary in a new work directory.
func buildTests(t *testing.T, ctx context.Context, pkg string) (bin, work string) {
	t.Helper()
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	run(t, ctx, here, nil, "sh", "ensure-deps.sh")
	work = t.TempDir()
	bin = filepath.Join(work, filepath.Base(pkg)+".test")
	run(t, ctx, filepath.Join(here, "..", ".."), []string{"CGO_ENABLED=0"}, "go", "test", "-c", "-o", bin, pkg)
	return bin, work
}
