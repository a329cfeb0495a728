package bgp

import (
	"context"
	"log/slog"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"
)

// logAdapter is an slog.Handler sending GoBGP's messages to logrus, at
// the level BGPConfiguration.logSeverity (or the process's) allows.
// Secrets never pass: attributes whose key mentions a password are
// dropped. Peer states and errors do not come from here but from
// GoBGP's peer events (diag.go).
type logAdapter struct {
	log   *logrus.Entry
	level *slog.LevelVar // also GoBGP's own filter
	attrs []slog.Attr
	group string

	mu *sync.Mutex // guards setSeverity's writes to level; shared
}

func newLogAdapter(l *logrus.Entry) *logAdapter {
	a := &logAdapter{log: l, level: &slog.LevelVar{}, mu: &sync.Mutex{}}
	a.setSeverity("")
	return a
}

// setSeverity applies BGPConfiguration.logSeverity; "" keeps the
// process's level.
func (a *logAdapter) setSeverity(s string) {
	lvl := a.log.Logger.GetLevel()
	if s != "" {
		if l, err := logrus.ParseLevel(s); err == nil {
			lvl = l
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.level.Set(toSlog(lvl))
}

func toSlog(l logrus.Level) slog.Level {
	switch {
	case l >= logrus.DebugLevel:
		return slog.LevelDebug
	case l == logrus.InfoLevel:
		return slog.LevelInfo
	case l == logrus.WarnLevel:
		return slog.LevelWarn
	}
	return slog.LevelError
}

func toLogrus(l slog.Level) logrus.Level {
	switch {
	case l >= slog.LevelError:
		return logrus.ErrorLevel
	case l >= slog.LevelWarn:
		return logrus.WarnLevel
	case l >= slog.LevelInfo:
		return logrus.InfoLevel
	}
	return logrus.DebugLevel
}

// Enabled implements slog.Handler.
func (a *logAdapter) Enabled(_ context.Context, l slog.Level) bool {
	return l >= a.level.Level() && a.log.Logger.IsLevelEnabled(toLogrus(l))
}

// Handle implements slog.Handler.
func (a *logAdapter) Handle(_ context.Context, r slog.Record) error {
	fields := logrus.Fields{}
	add := func(at slog.Attr) bool {
		key := at.Key
		if a.group != "" {
			key = a.group + "." + key
		}
		if !strings.Contains(strings.ToLower(key), "password") {
			fields[key] = at.Value.Resolve().Any()
		}
		return true
	}
	for _, at := range a.attrs {
		add(at)
	}
	r.Attrs(add)
	a.log.WithFields(fields).Log(toLogrus(r.Level), r.Message)
	return nil
}

// WithAttrs implements slog.Handler.
func (a *logAdapter) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *a
	c.attrs = append(append([]slog.Attr(nil), a.attrs...), attrs...)
	return &c
}

// WithGroup implements slog.Handler.
func (a *logAdapter) WithGroup(name string) slog.Handler {
	c := *a
	if c.group != "" {
		name = c.group + "." + name
	}
	c.group = name
	return &c
}
