package testenv

import (
	"testing"
	"time"
)

// Eventually polls cond every interval until it returns "" or timeout
// passes, then fails with cond's last message.
func Eventually(t testing.TB, timeout, interval time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, msg)
		}
		time.Sleep(interval)
	}
}
