package bgp

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
	"github.com/sirupsen/logrus"
)

// logAdapter sends GoBGP's messages to logrus and feeds the peer
// diagnostics.
//
// GoBGP v3 exposes no per-peer "last error" in its API: why a session is
// not up (a refused connection, a NOTIFICATION) only appears in its log
// messages, some of them at debug level only ("failed to connect"). So
// the adapter claims debug level towards GoBGP, hands every message to
// diag, and forwards to logrus only what the configured level allows.
// The message texts matched are those of GoBGP v3.37.0 (pinned in
// go.mod); TestDiagMessages pins them.
type logAdapter struct {
	log  *logrus.Entry
	diag *diag

	mu    sync.RWMutex
	level logrus.Level
}

func newLogAdapter(l *logrus.Entry, d *diag) *logAdapter {
	return &logAdapter{log: l, diag: d, level: l.Logger.GetLevel()}
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
	a.level = lvl
	a.mu.Unlock()
}

func (a *logAdapter) emit(lvl logrus.Level, msg string, f gobgplog.Fields) {
	a.diag.observe(msg, f)
	a.mu.RLock()
	on := lvl <= a.level
	a.mu.RUnlock()
	if !on || !a.log.Logger.IsLevelEnabled(lvl) {
		return
	}
	fields := make(logrus.Fields, len(f))
	for k, v := range f {
		if strings.Contains(strings.ToLower(k), "password") {
			continue // never log secrets, whatever GoBGP puts in
		}
		fields[k] = v
	}
	a.log.WithFields(fields).Log(lvl, msg)
}

// Panic implements gobgplog.Logger.
func (a *logAdapter) Panic(msg string, f gobgplog.Fields) {
	a.emit(logrus.PanicLevel, msg, f)
	panic(msg)
}

// Fatal implements gobgplog.Logger. GoBGP calls it for unrecoverable
// errors; like logrus, it exits.
func (a *logAdapter) Fatal(msg string, f gobgplog.Fields) {
	a.log.WithFields(logrus.Fields(f)).Fatal(msg)
}

// Error implements gobgplog.Logger.
func (a *logAdapter) Error(msg string, f gobgplog.Fields) { a.emit(logrus.ErrorLevel, msg, f) }

// Warn implements gobgplog.Logger.
func (a *logAdapter) Warn(msg string, f gobgplog.Fields) { a.emit(logrus.WarnLevel, msg, f) }

// Info implements gobgplog.Logger.
func (a *logAdapter) Info(msg string, f gobgplog.Fields) { a.emit(logrus.InfoLevel, msg, f) }

// Debug implements gobgplog.Logger.
func (a *logAdapter) Debug(msg string, f gobgplog.Fields) { a.emit(logrus.DebugLevel, msg, f) }

// SetLevel implements gobgplog.Logger.
func (a *logAdapter) SetLevel(l gobgplog.LogLevel) {
	a.mu.Lock()
	a.level = logrus.Level(l)
	a.mu.Unlock()
}

// GetLevel implements gobgplog.Logger: always debug, see logAdapter.
func (a *logAdapter) GetLevel() gobgplog.LogLevel { return gobgplog.DebugLevel }

// diag remembers, per peer address, the last reason its session failed.
// GoBGP's goroutines write it through the log adapter; status reads it.
type diag struct {
	mu    sync.Mutex
	peers map[string]*peerDiag
}

type peerDiag struct {
	lastErr string
	at      time.Time
	// since is when the session last went up or down (or was configured).
	since time.Time
	// hasPassword says a timeout is likely an MD5 mismatch.
	hasPassword bool
}

func newDiag() *diag { return &diag{peers: map[string]*peerDiag{}} }

// configure registers a peer (and forgets its old errors).
func (d *diag) configure(addr string, hasPassword bool) {
	d.mu.Lock()
	d.peers[addr] = &peerDiag{hasPassword: hasPassword, since: time.Now()}
	d.mu.Unlock()
}

// setPassword records whether the peer uses MD5 without forgetting its
// history (an updated session may or may not have been reset).
func (d *diag) setPassword(addr string, hasPassword bool) {
	d.mu.Lock()
	if p := d.peers[addr]; p != nil {
		p.hasPassword = hasPassword
	}
	d.mu.Unlock()
}

func (d *diag) forget(addr string) {
	d.mu.Lock()
	delete(d.peers, addr)
	d.mu.Unlock()
}

// get returns the last recorded failure of a peer and when its session
// last changed between up and down.
func (d *diag) get(addr string) (lastErr string, since time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.peers[addr]; p != nil {
		return p.lastErr, p.since
	}
	return "", time.Time{}
}

// transition records a session going up or down.
func (d *diag) transition(addr string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.peers[addr]; p != nil {
		p.since = time.Now()
	}
}

func (d *diag) set(addr, msg string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.peers[addr]
	if p == nil {
		return // not a peer we configured (or already removed)
	}
	if msg == "" {
		p.lastErr = ""
		return
	}
	if p.hasPassword && strings.Contains(msg, "timed out") {
		msg += " (TCP MD5 password mismatch?)"
	}
	p.lastErr, p.at = msg, time.Now()
}

// observe interprets one GoBGP log message.
func (d *diag) observe(msg string, f gobgplog.Fields) {
	key, _ := f["Key"].(string)
	if key == "" {
		return
	}
	switch msg {
	case "failed to connect":
		if err, ok := f["Error"].(error); ok {
			d.set(key, connectError(err))
		}
	case "received notification":
		d.set(key, "received notification: "+notificationText(f["Code"], f["Subcode"], f["Communicated-Reason"]))
	case "sent notification":
		d.set(key, "sent notification: "+sentNotificationText(f["Data"]))
	case "hold timer expired":
		d.set(key, "hold timer expired")
	case "Peer Up":
		d.set(key, "")
		d.transition(key)
	case "Peer Down":
		d.transition(key)
	case "state changed":
		d.stateChanged(key, f)
	}
}

// stateChanged records why a session left OpenSent, OpenConfirm or
// Established when no more specific message said so.
func (d *diag) stateChanged(key string, f gobgplog.Fields) {
	old, _ := f["old"].(string)
	if old != "BGP_FSM_OPENSENT" && old != "BGP_FSM_OPENCONFIRM" && old != "BGP_FSM_ESTABLISHED" {
		return
	}
	reason := fmt.Sprint(f["reason"])
	switch {
	case reason == "read-failed" || reason == "write-failed":
		d.set(key, "connection closed by peer")
	case reason == "invalid-msg" && old != "BGP_FSM_ESTABLISHED":
		// GoBGP neither logs nor reports a NOTIFICATION received before
		// Established; the peer most likely rejected our OPEN.
		d.setUnlessNotification(key, "peer rejected our OPEN (check AS numbers on both sides)")
	case strings.HasPrefix(reason, "notification-received "):
		d.set(key, "received notification: "+codeFromString(strings.TrimPrefix(reason, "notification-received ")))
	case reason == "hold-timer-expired":
		d.set(key, "hold timer expired")
	}
}

// setUnlessNotification keeps a more precise sent-notification error.
func (d *diag) setUnlessNotification(addr, msg string) {
	d.mu.Lock()
	p := d.peers[addr]
	keep := p != nil && strings.HasPrefix(p.lastErr, "sent notification") && time.Since(p.at) < time.Second
	d.mu.Unlock()
	if !keep {
		d.set(addr, msg)
	}
}

// connectError turns a dial error into "connect: connection refused" or
// "connect: timed out".
func connectError(err error) string {
	s := err.Error()
	if strings.Contains(s, "i/o timeout") || strings.Contains(s, "timed out") {
		return "connect: timed out"
	}
	if i := strings.Index(s, "connect: "); i >= 0 {
		return s[i:]
	}
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return "connect: " + s[i+2:]
	}
	return "connect: " + s
}

var codeRe = regexp.MustCompile(`code \d+\(([^)]*)\) subcode (\d+)\(([^)]*)\)`)

// ceaseSubcodes names Cease subcodes GoBGP's table lacks (RFC 8538).
var ceaseSubcodes = map[string]string{"9": "hard reset", "10": "BFD down"}

// notificationText names a NOTIFICATION: "open: bad peer AS".
func notificationText(code, subcode, reason any) string {
	c, _ := code.(uint8)
	s, _ := subcode.(uint8)
	txt := codeName(c, s)
	if r, ok := reason.(string); ok && r != "" {
		txt += " (" + r + ")"
	}
	return txt
}

func codeName(c, s uint8) string { return codeFromString(notificationCodeString(c, s)) }

// codeFromString rewrites GoBGP's "code 2(open) subcode 2(bad peer as)".
func codeFromString(str string) string {
	m := codeRe.FindStringSubmatch(str)
	if m == nil {
		return str
	}
	sub := strings.ReplaceAll(m[3], "peer as", "peer AS")
	if sub == "undefined" && m[1] == "cease" {
		sub = ceaseSubcodes[m[2]]
	}
	if sub == "undefined" || sub == "" {
		return m[1]
	}
	return m[1] + ": " + sub
}

// sentNotificationText describes a NOTIFICATION this speaker sent; GoBGP
// logs it as a *bgp.MessageError whose text says what was wrong.
func sentNotificationText(data any) string {
	if me, ok := data.(*bgp.MessageError); ok {
		txt := codeName(me.TypeCode, me.SubTypeCode)
		if me.Message != "" {
			txt += " (" + me.Message + ")"
		}
		return txt
	}
	if e, ok := data.(error); ok {
		return e.Error()
	}
	return fmt.Sprint(data)
}

func notificationCodeString(c, s uint8) string {
	return bgp.NewNotificationErrorCode(c, s).String()
}
