package flowagg

import (
	"testing"
	"time"
)

// TestSessionsExpireAndAreBounded: a session is valid until
// SessionMaxAge after sign-in and not after, whatever its cookie's
// Max-Age says; past maxSessions the one closest to expiry goes.
func TestSessionsExpireAndAreBounded(t *testing.T) {
	var s sessions
	t0 := time.Now()
	id := s.create(t0)
	if !s.valid(id, t0.Add(SessionMaxAge-time.Second)) {
		t.Errorf("a session just before SessionMaxAge is not valid")
	}
	if s.valid(id, t0.Add(SessionMaxAge)) || s.valid(id, t0) {
		t.Errorf("a session past SessionMaxAge is still valid (or came back)")
	}
	first := s.create(t0)
	for i := range maxSessions {
		s.create(t0.Add(time.Duration(i+1) * time.Millisecond))
	}
	if len(s.ids) != maxSessions || s.valid(first, t0) {
		t.Errorf("%d sessions held after %d sign-ins, the oldest valid: %v; want %d and not", len(s.ids), maxSessions+1, s.valid(first, t0), maxSessions)
	}
}
