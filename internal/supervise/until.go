package supervise

import (
	"context"
	"time"
)

// Until calls cond at once and then every interval until it reports
// true (Until returns true) or ctx ends first (false). A nil cond is
// true at once. Parts use it to wait for a state that has no event of
// its own, such as the node being in sync.
func Until(ctx context.Context, interval time.Duration, cond func() bool) bool {
	if cond == nil {
		return true
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}
