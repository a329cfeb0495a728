package felix

import "sync"

// WedgeLoop blocks felix's Run loop, as a netlink call that never
// returns would, until release is called; it returns once the loop is
// blocked. Run must be running.
func (f *Felix) WedgeLoop() (release func()) {
	in, out := make(chan struct{}), make(chan struct{})
	f.enqueue(func(*loop) { close(in); <-out })
	<-in
	return sync.OnceFunc(func() { close(out) })
}
