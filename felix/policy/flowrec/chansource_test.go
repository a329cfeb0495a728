package flowrec

import "time"

// chanSource feeds the loop conntrack events from a channel of
// batches, and takes marks while it waits (tests send them on an
// unbuffered channel, without waking the loop).
type chanSource struct {
	in    <-chan []ctEvent
	got   [][]ctEvent
	wake  chan struct{}
	timer *time.Timer
	until time.Time
}

func newChanSource(in <-chan []ctEvent) *chanSource {
	return &chanSource{in: in, wake: make(chan struct{}, 1)}
}

func (s *chanSource) read(fn func(*ctEvent)) (int, bool) {
	n := 0
	for {
		for _, evs := range s.got {
			for i := range evs {
				fn(&evs[i])
			}
			n += len(evs)
		}
		s.got = s.got[:0]
		select {
		case evs := <-s.in:
			s.got = append(s.got, evs)
		default:
			return n, false
		}
	}
}

func (s *chanSource) arm(until time.Time) {
	s.until = until
	select {
	case <-s.wake:
	default:
	}
}

func (s *chanSource) wait(marks <-chan mark) (mark, bool) {
	d := time.Until(s.until)
	if d <= 0 {
		return mark{}, false
	}
	if s.timer == nil {
		s.timer = time.NewTimer(d)
	} else {
		s.timer.Reset(d)
	}
	defer s.timer.Stop()
	select {
	case <-s.wake:
	case <-s.timer.C:
	case evs := <-s.in:
		s.got = append(s.got, evs)
	case m := <-marks:
		return m, true
	}
	return mark{}, false
}

func (s *chanSource) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *chanSource) settle() {}
