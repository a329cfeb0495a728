package lab

import (
	"fmt"
	"os"
	"syscall"
	"testing"
)

// ClaimIndex takes a lab index (for DefaultTopology) that no other test
// process on this machine holds: a flock on a file per index, released
// when the test ends. The index names the lab's namespaces and address
// ranges, and a lab starting with a name in use cleans up the running
// one's, so every test that brings a lab up claims its index here.
// DefaultTopology needs <= 55.
func ClaimIndex(t testing.TB) int {
	t.Helper()
	for idx := 1; idx <= 55; idx++ {
		f, err := os.OpenFile(fmt.Sprintf("/run/routed-e2e-lab-%d.lock", idx), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		t.Cleanup(func() { f.Close() }) // registered first: runs after the lab is down
		return idx
	}
	t.Fatal("all 55 lab indexes are held by running tests")
	return 0
}
