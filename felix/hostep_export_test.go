package felix

import (
	"sync"
	"testing"
)

// HoldHostAddrs holds felix back after an address or host interface
// change: each time its loop is about to look the host's addresses up
// again, it signals entered and waits, as the whole loop does, until
// release (called at the test's end at the latest). What is policed
// meanwhile is the kernel's doing alone.
func (f *Felix) HoldHostAddrs(t *testing.T) (entered <-chan struct{}, release func()) {
	in, out := make(chan struct{}, 64), make(chan struct{})
	set := make(chan struct{})
	f.enqueue(func(l *loop) {
		l.hosts.hold = func() {
			select {
			case in <- struct{}{}:
			default:
			}
			<-out
		}
		close(set)
	})
	<-set
	release = sync.OnceFunc(func() {
		close(out)
		f.enqueue(func(l *loop) { l.hosts.hold = nil })
	})
	t.Cleanup(release)
	return in, release
}
