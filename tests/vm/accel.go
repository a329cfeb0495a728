package vm

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// accel is how qemu runs the guest and the deadlines that follow from it.
type accel struct {
	Name string // qemu's -accel value: "kvm" or "tcg"
	Why  string // why this one, logged so a failure names it
	SMP  int    // the guest's vCPUs
	// Limit is how long a VM may run before the test calls it hung.
	Limit time.Duration
	// WaitScale multiplies the waits of the program in the guest: the
	// lab's deadlines are sized for a host, and TCG emulates every guest
	// instruction (quiet, the lab takes 60-90 s under TCG), several
	// times more when the suite's other packages share the host's cores.
	WaitScale int
}

// KVM ioctls (linux/kvm.h): _IO(0xAE, 0x00) and _IO(0xAE, 0x01).
const (
	kvmGetAPIVersion = 0xAE00
	kvmCreateVM      = 0xAE01
	kvmAPIVersion    = 12
)

// chooseAccel picks KVM when this host's KVM is hardware-backed and
// starts a VM, else TCG. ROUTED_VM_ACCEL=kvm|tcg forces one and
// ROUTED_VM_SMP=N the vCPU count (to measure one against the other).
//
// KVM is not taken just because /dev/kvm opens: on a host that is itself
// a VM without nested virtualisation, /dev/kvm can be kvm_pvm, a
// paravirtual backend that runs only PVM-built guest kernels well. Under
// it Debian's stock cloud kernel printed nothing in 7 minutes (10 s in it
// was still in the decompressor), where TCG ran the same image to its
// end in 32 s on the same loaded host.
func chooseAccel(t *testing.T, smp int, tcgLimit, kvmLimit time.Duration) accel {
	t.Helper()
	a := accel{Name: "tcg", Limit: tcgLimit}
	switch forced := os.Getenv("ROUTED_VM_ACCEL"); forced {
	case "kvm", "tcg":
		a.Name, a.Why = forced, "ROUTED_VM_ACCEL="+forced
	case "":
		if err := kvmUsable(); err != nil {
			a.Why = err.Error()
		} else {
			a.Name, a.Why = "kvm", "/dev/kvm opens read-write, is hardware-backed and creates a VM"
		}
	default:
		t.Fatalf("ROUTED_VM_ACCEL=%q: want kvm, tcg or unset", forced)
	}
	a.WaitScale = 4
	if a.Name == "kvm" {
		a.Limit, a.WaitScale = kvmLimit, 1
	}
	// The caller's vCPUs, no more than the host has. One vCPU for the
	// lab was tried under TCG on this 2-core host (to keep two vCPU
	// threads from being descheduled together): with etcd and four
	// routed on it, routed's own etcd dials timed out under load and the
	// lab failed where two vCPUs pass, so the lab keeps two.
	a.SMP = smp
	if a.SMP > runtime.NumCPU() {
		a.SMP = runtime.NumCPU()
	}
	if s := os.Getenv("ROUTED_VM_SMP"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 8 {
			t.Fatalf("ROUTED_VM_SMP=%q: want a vCPU count from 1 to 8", s)
		}
		a.SMP = n
	}
	// Fail with the console shown before the package's -timeout panics
	// (which prints no console at all).
	if dl, ok := t.Deadline(); ok {
		if left := time.Until(dl) - 45*time.Second; left < a.Limit {
			a.Limit = left
		}
	}
	if a.Limit < time.Minute {
		t.Fatalf("only %v left before the test binary's -timeout: too little to boot a VM (%s); raise -timeout", a.Limit, a.Name)
	}
	t.Logf("qemu: -accel %s -smp %d (%s); the VM may run %v; host load %s", a.Name, a.SMP, a.Why, a.Limit.Round(time.Second), loadAvg())
	return a
}

// kvmUsable says why KVM cannot run the guest here, or nil.
func kvmUsable() error {
	fd, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("/dev/kvm: %w", err)
	}
	defer unix.Close(fd)
	if v, err := unix.IoctlRetInt(fd, kvmGetAPIVersion); err != nil || v != kvmAPIVersion {
		return fmt.Errorf("/dev/kvm: KVM_GET_API_VERSION %d (%v), want %d", v, err, kvmAPIVersion)
	}
	vm, err := unix.IoctlRetInt(fd, kvmCreateVM)
	if err != nil {
		return fmt.Errorf("/dev/kvm: KVM_CREATE_VM: %w", err)
	}
	unix.Close(vm)
	for _, m := range []string{"kvm_intel", "kvm_amd"} {
		if _, err := os.Stat("/sys/module/" + m); err == nil {
			return nil
		}
	}
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil {
		return fmt.Errorf("/dev/kvm is kvm_pvm (paravirtual, no kvm_intel/kvm_amd): a stock guest kernel barely runs under it")
	}
	return fmt.Errorf("/dev/kvm has no kvm_intel or kvm_amd backend loaded")
}

// loadAvg is the host's /proc/loadavg 1, 5 and 15 minute figures.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	var l1, l5, l15 string
	fmt.Sscan(string(b), &l1, &l5, &l15)
	return l1 + " " + l5 + " " + l15
}

// guestTimeout is the budget the program inside the VM gets: the VM's
// limit less a minute for booting and powering off, so the guest's own
// timeout (which names what it waited for) fires before the host kills
// qemu.
func guestTimeout(a accel) time.Duration {
	return a.Limit - time.Minute
}
