// Package vm boots a small VM (Debian's 6.1 cloud kernel under qemu TCG,
// busybox initramfs) to test what the CI kernel cannot do: it has no ipip
// module. The VM runs felix's own test binary with ROUTED_IN_VM=1.
package vm

import (
	"bytes"
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
var vmTests = []string{"TestIPIPInVM", "TestIPIPVXLANSwitchInVM", "TestEncapThroughputInVM", "TestWireguardThroughputInVM", "TestWireguardHostEncryptionInVM"}

// TestIPIPInVM builds felix's tests as a static binary, boots it in a VM
// with veth, ipip and vxlan loaded (and iperf3) and runs vmTests there.
func TestIPIPInVM(t *testing.T) {
	testenv.RequireRoot(t, "apt-get, network namespaces")
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(here, "..", "..")
	run(t, ctx, here, nil, "sh", "ensure-deps.sh")

	work := t.TempDir()
	bin := filepath.Join(work, "felix.test")
	run(t, ctx, root, []string{"CGO_ENABLED=0"}, "go", "test", "-c", "-o", bin, "./felix")
	start := time.Now()
	// vxlan too: felix's TestIPIPVXLANSwitchInVM switches a pool between them.
	// iperf3 for felix's TestEncapThroughputInVM (plain, IPIP, VXLAN).
	// nf_tables for TestWireguardHostEncryptionInVM (its incoming mark).
	run(t, ctx, here, []string{"VM_MODULES=vxlan wireguard nf_tables", "VM_DYNBINS=/usr/bin/iperf3"}, "sh", "build-initramfs.sh", cacheDir(), bin, work,
		"-test.v", "-test.run", "^("+strings.Join(vmTests, "|")+")$", "-test.timeout", "240s")
	t.Logf("initramfs built in %v", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	qemu := exec.CommandContext(ctx, "qemu-system-x86_64", "-accel", "tcg", "-m", "1024", "-smp", "1",
		"-nographic", "-no-reboot", "-nic", "none",
		"-kernel", filepath.Join(work, "vmlinuz"), "-initrd", filepath.Join(work, "initrd.gz"),
		"-append", "console=ttyS0 panic=-1 edd=off quiet")
	var serial bytes.Buffer
	qemu.Stdout, qemu.Stderr = &serial, &serial
	qemu.Stdin = nil
	err = qemu.Run()
	out := serial.String()
	_ = os.WriteFile(filepath.Join(work, "serial.log"), serial.Bytes(), 0o644)
	t.Logf("VM ran for %v", time.Since(start).Round(time.Millisecond))
	m := regexp.MustCompile(`ROUTED-VM-EXIT (\d+)`).FindStringSubmatch(out)
	switch {
	case m == nil:
		t.Fatalf("the VM did not report a result (qemu: %v); serial console:\n%s", err, out)
	case m[1] != "0":
		t.Fatalf("felix's tests failed in the VM (exit %s); serial console:\n%s", m[1], out)
	}
	for _, name := range vmTests {
		if !strings.Contains(out, "--- PASS: "+name) {
			t.Fatalf("felix's %s did not pass in the VM; serial console:\n%s", name, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "ROUTED-VM") || strings.Contains(line, "--- ") || strings.Contains(line, "PASS") || strings.Contains(line, "converged") || strings.Contains(line, "ENCAP-THROUGHPUT") || strings.Contains(line, "WIREGUARD-THROUGHPUT") {
			t.Log(strings.TrimSpace(line))
		}
	}
}
