package vm

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/routed-net/routed/tests/testbin"

	"github.com/routed-net/routed/internal/testenv"
)

// cnitoolModule is the CNI runtime client the lab drives pods with.
const cnitoolModule = "github.com/containernetworking/cni/cnitool@v1.3.1"

// labModules are loaded in the lab VM besides veth and ipip: the router's
// bridges, felix's NAT table (nft masquerade in a nat chain) and
// WireGuard (the lab's last phase turns it on over the IPIP pool).
const labModules = "bridge nf_tables nft_chain_nat nft_masq wireguard"

// routedPkgs are routed's binaries the lab runs (routed-etcd is its
// `routed etcd`). The CNI plugins are
// testbin's socket-only builds, which hand what routed does not take to
// their full builds beside them (cniplugin/fullbin), so those go too (a
// plugin built here when testbin's is not static is the full build).
var routedPkgs = map[string]string{
	"routed":           "./routed/cmd/routed",
	"routed-etcd":      "./routed/cmd/routed-etcd",
	"routedctl":        "./routed/cmd/routedctl",
	"routed-cni":       "./cniplugin/cmd/routed-cni",
	"routed-ipam":      "./cniplugin/cmd/routed-ipam",
	"routed-cni-full":  "./cniplugin/cmd/routed-cni",
	"routed-ipam-full": "./cniplugin/cmd/routed-ipam",
}

// TestLabIPIPInVM runs the whole lab (etcd, routed on four nodes over two
// subnets, pods through cnitool and the CNI plugins) inside a VM whose
// kernel has the ipip module, with ipipMode CrossSubnet and no BGP on the
// router: cross-subnet pod traffic must go through tunl0 (its counters
// move) and same-subnet traffic must not. Then FelixConfiguration
// wireguardEnabled, applied with routedctl, turns WireGuard on over the
// same IPIP pool: cross-subnet pod pings and a TCP connection go
// through wg.routed (its counters move by at least the probes) and
// not tunl0 (its counters stay still), a new pod gets the WireGuard
// MTU; deleted, traffic is back on tunl0. tests/vm/labvm does the
// checking inside the VM.
func TestLabIPIPInVM(t *testing.T) {
	testenv.RequireRoot(t, "apt-get, network namespaces")
	ctx, cancel := context.WithTimeout(context.Background(), 13*time.Minute)
	defer cancel()
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(here, "..", "..")
	run(t, ctx, here, nil, "sh", "ensure-deps.sh")

	work := t.TempDir()
	start := time.Now()
	// Everything the VM runs, under /opt/routed/bin there.
	files := filepath.Join(work, "files")
	binDir := filepath.Join(files, "opt", "routed", "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name := range routedPkgs {
		link(t, staticRouted(t, ctx, root, work, name), filepath.Join(binDir, name))
	}
	link(t, staticCnitool(t, ctx, work), filepath.Join(binDir, "cnitool"))
	labvm := filepath.Join(work, "labvm")
	run(t, ctx, root, []string{"CGO_ENABLED=0"}, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", labvm, "./tests/vm/labvm")
	t.Logf("binaries ready in %v", time.Since(start).Round(time.Millisecond))

	// iproute2's ip (busybox's has no netns) and iputils' ping (the lab
	// passes -n), with their libraries.
	var dyn []string
	for _, name := range []string{"ip", "ping"} {
		dyn = append(dyn, hostTool(t, name))
	}
	// Quiet, the lab takes 60-90 s under TCG; a 2-core host running the
	// suite's other packages beside it stretches that several times.
	a := chooseAccel(t, 2, 9*time.Minute, 4*time.Minute)
	t.Logf("the lab's waits in the VM x%d (-accel %s)", a.WaitScale, a.Name)
	start = time.Now()
	run(t, ctx, here, []string{
		"VM_MODULES=" + labModules,
		"VM_FILES=" + files,
		"VM_DYNBINS=" + strings.Join(dyn, " "),
	}, "sh", "build-initramfs.sh", cacheDir(), labvm, work, "-timeout", guestTimeout(a).String(), "-wait-scale", strconv.Itoa(a.WaitScale))
	if fi, err := os.Stat(filepath.Join(work, "initrd.gz")); err == nil {
		t.Logf("initramfs built in %v (%d MB)", time.Since(start).Round(time.Millisecond), fi.Size()>>20)
	}

	out, dur, err := boot(t, ctx, work, a, "2048")
	t.Logf("VM ran for %v (-accel %s -smp %d, host load %s)", dur.Round(time.Millisecond), a.Name, a.SMP, loadAvg())
	m := regexp.MustCompile(`ROUTED-VM-EXIT (\d+)`).FindStringSubmatch(out)
	switch {
	case m == nil:
		t.Fatalf("the VM did not report a result within %v under -accel %s (qemu: %v); serial console (tail):\n%s", a.Limit.Round(time.Second), a.Name, err, tail(out, 200))
	case m[1] != "0" || !strings.Contains(out, "ROUTED-LABVM: PASS"):
		t.Fatalf("the lab failed in the VM (exit %s, -accel %s); serial console (tail):\n%s", m[1], a.Name, tail(out, 200))
	}
	var summary []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "ROUTED-LABVM") || strings.Contains(line, "ROUTED-VM") {
			summary = append(summary, strings.TrimSpace(line))
		}
	}
	t.Logf("summary:\n%s", strings.Join(summary, "\n"))
}

// boot runs the VM in work (memory in MiB) until it powers off or
// a.Limit passes, logging the serial console line by line as it comes.
func boot(t *testing.T, ctx context.Context, work string, a accel, mem string) (string, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, a.Limit)
	defer cancel()
	start := time.Now()
	args := []string{"-accel", a.Name, "-m", mem, "-smp", strconv.Itoa(a.SMP)}
	if a.Name == "kvm" {
		args = append(args, "-cpu", "host")
	}
	args = append(args, "-nographic", "-no-reboot", "-nic", "none",
		"-kernel", filepath.Join(work, "vmlinuz"), "-initrd", filepath.Join(work, "initrd.gz"),
		// loglevel=5, not quiet: a stalled guest's backtraces (warning
		// level) reach the console, from every CPU. Fresh-clone run 115
		// (TCG, loaded host) saw both vCPUs soft-locked in routed for
		// 450 s and only the "BUG:" lines, which quiet lets through.
		"-append", "console=ttyS0 panic=-1 edd=off loglevel=5 softlockup_all_cpu_backtrace=1")
	qemu := exec.CommandContext(ctx, "qemu-system-x86_64", args...)
	w := &lineLogger{t: t, start: start}
	qemu.Stdout, qemu.Stderr = w, w
	qemu.Stdin = nil
	// CommandContext kills only this qemu (by its PID) when time is up.
	qemu.WaitDelay = 10 * time.Second
	err := qemu.Run()
	w.flush()
	out := w.String()
	_ = os.WriteFile(filepath.Join(work, "serial.log"), []byte(out), 0o644)
	return out, time.Since(start), err
}

// lineLogger keeps the console output and logs every complete line.
type lineLogger struct {
	t     *testing.T
	start time.Time
	mu    sync.Mutex
	all   bytes.Buffer
	part  []byte
}

func (w *lineLogger) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all.Write(b)
	w.part = append(w.part, b...)
	for {
		i := bytes.IndexByte(w.part, '\n')
		if i < 0 {
			break
		}
		w.log(w.part[:i])
		w.part = w.part[i+1:]
	}
	return len(b), nil
}

// consoleNoise is the terminal control the firmware and the kernel write
// to the serial console.
var consoleNoise = regexp.MustCompile(`\x1b(\[[0-9;?]*[A-Za-z]|c)|\r`)

func (w *lineLogger) log(line []byte) {
	s := consoleNoise.ReplaceAllString(string(line), "")
	if s != "" {
		w.t.Logf("vm %6.1fs| %s", time.Since(w.start).Seconds(), s)
	}
}

func (w *lineLogger) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.part) > 0 {
		w.log(w.part)
		w.part = nil
	}
}

func (w *lineLogger) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return consoleNoise.ReplaceAllString(w.all.String(), "")
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// isStatic reports whether an ELF executable has no program interpreter.
func isStatic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}

// staticRouted returns a statically linked routed binary: the one
// testbin finds ($ROUTED_BIN from `make build`, CGO_ENABLED=0) when it is
// static, else one built here.
func staticRouted(t *testing.T, ctx context.Context, root, work, name string) string {
	t.Helper()
	p := testbin.Path(t, name)
	if ok, err := isStatic(p); err == nil && ok {
		return p
	}
	p = filepath.Join(work, "build", name)
	run(t, ctx, root, []string{"CGO_ENABLED=0"}, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", p, routedPkgs[name])
	return p
}

// staticCnitool builds cnitool with CGO_ENABLED=0 once and keeps it in
// the download cache (the one `go install` puts in GOPATH/bin is
// dynamically linked when cgo is available).
func staticCnitool(t *testing.T, ctx context.Context, work string) string {
	t.Helper()
	ver := cnitoolModule[strings.LastIndex(cnitoolModule, "@")+1:]
	dir := filepath.Join(cacheDir(), "cnitool-"+ver)
	p := filepath.Join(dir, "cnitool")
	if ok, err := isStatic(p); err == nil && ok {
		return p
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	gobin, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(gobin)
	run(t, ctx, work, []string{"CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOBIN=" + gobin},
		"go", "install", "-trimpath", "-ldflags", "-s -w", cnitoolModule)
	if ok, err := isStatic(filepath.Join(gobin, "cnitool")); err != nil || !ok {
		t.Fatalf("cnitool built with CGO_ENABLED=0 is not static (%v)", err)
	}
	// Atomic: a test running side by side sees the old file or the new.
	if err := os.Rename(filepath.Join(gobin, "cnitool"), p); err != nil {
		t.Fatal(err)
	}
	return p
}

// hostTool finds a host command that is not busybox, for VM_DYNBINS.
func hostTool(t *testing.T, name string) string {
	t.Helper()
	for _, d := range []string{"/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		p := filepath.Join(d, name)
		real, err := filepath.EvalSymlinks(p)
		if err != nil || filepath.Base(real) == "busybox" {
			continue
		}
		// The VM's PATH puts these directories before busybox's /bin
		// links, and busybox --install leaves existing files alone.
		if fi, err := os.Stat(real); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	t.Fatalf("no %s on the host (ensure-deps.sh installs iproute2 and iputils-ping)", name)
	return ""
}

// link symlinks target at name; build-initramfs.sh copies what it points at.
func link(t *testing.T, target, name string) {
	t.Helper()
	abs, err := filepath.Abs(target)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(abs, name); err != nil {
		t.Fatal(fmt.Errorf("link %s: %w", name, err))
	}
}
