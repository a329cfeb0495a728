package flowagg

import (
	"crypto/rand"
	"net/http"
	"sync"
	"time"
)

// The page's session: the sign-in form trades the reader token for a
// random session id held by the server, so the token never leaves the
// sign-in request. Cookies are not scoped by port: another app served
// on 127.0.0.1 (the port-forward's address) receives this cookie, and
// with it at most a session that expires, that /logout ends, and that
// an aggregator restart forgets, never the permanent token.
const (
	// sessionCookie is __Host- prefixed: the browser keeps it only if
	// it is Secure, Path=/ and without Domain (the aggregator serves
	// only HTTPS, https://127.0.0.1:PORT with a port-forward too).
	sessionCookie = "__Host-routed-flows-session"
	// SessionMaxAge is how long a session lasts after sign-in.
	SessionMaxAge = 8 * time.Hour
	// maxSessions bounds the sessions held: past it the one closest
	// to expiry goes (only token holders create sessions).
	maxSessions = 1024
)

// sessions are the page's signed-in sessions, by id, with their expiry.
type sessions struct {
	mu  sync.Mutex
	ids map[string]time.Time
	// gone is closed (and replaced) when a session ends: follow
	// streams of a session check it again.
	gone chan struct{}
}

// create returns a new session's id.
func (s *sessions) create(now time.Time) string {
	id := rand.Text() + rand.Text() // 2 x 128 bits, base32
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[string]time.Time{}
	}
	for k, exp := range s.ids {
		if !now.Before(exp) {
			delete(s.ids, k)
		}
	}
	if len(s.ids) >= maxSessions {
		var oldest string
		for k, exp := range s.ids {
			if oldest == "" || exp.Before(s.ids[oldest]) {
				oldest = k
			}
		}
		delete(s.ids, oldest)
	}
	s.ids[id] = now.Add(SessionMaxAge)
	return id
}

// valid reports whether id is a live session.
func (s *sessions) valid(id string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.ids[id]
	if ok && !now.Before(exp) {
		delete(s.ids, id)
		return false
	}
	return ok
}

// end forgets id.
func (s *sessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ids, id)
	if s.gone != nil {
		close(s.gone)
		s.gone = nil
	}
}

// ended is closed when a session ends next.
func (s *sessions) ended() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone == nil {
		s.gone = make(chan struct{})
	}
	return s.gone
}

// sessionCookieFor is the cookie of session id (an empty id and
// maxAge -1 clear it).
func sessionCookieFor(id string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: sessionCookie, Value: id, Path: "/", MaxAge: maxAge, HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode}
}
