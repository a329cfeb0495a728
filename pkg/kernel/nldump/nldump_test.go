package nldump

import (
	"errors"
	"fmt"
	"testing"

	"github.com/vishvananda/netlink"
)

func TestRetry(t *testing.T) {
	calls := 0
	v, err := Retry(func() (int, error) {
		calls++
		if calls < 3 {
			return -1, fmt.Errorf("list: %w", netlink.ErrDumpInterrupted)
		}
		return 7, nil
	})
	if v != 7 || err != nil || calls != 3 {
		t.Fatalf("interrupted twice then whole: got %d, %v after %d calls", v, err, calls)
	}
	calls = 0
	_, err = Retry(func() (int, error) { calls++; return 0, netlink.ErrDumpInterrupted })
	if !errors.Is(err, netlink.ErrDumpInterrupted) || calls != Retries {
		t.Fatalf("always interrupted: %v after %d calls, want the error after %d", err, calls, Retries)
	}
	calls = 0
	other := errors.New("no such device")
	if _, err = Retry(func() (int, error) { calls++; return 0, other }); err != other || calls != 1 {
		t.Fatalf("another error: %v after %d calls, want it at once", err, calls)
	}
}
