package lab

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
)

// PortWatch records, for every felix node, when a rule or set element
// matching a given transport port first appeared in its nftables
// ruleset, from the kernel's nftables events: the moment a policy edit
// is in the node's tables, not when felix says it wrote it.
type PortWatch struct {
	mu   sync.Mutex
	seen map[uint16]map[string]time.Time
	errs []error
	mons []*nftables.Monitor
	nss  []netns.NsHandle
	wg   sync.WaitGroup
}

// WatchPorts subscribes to every felix node's nftables events.
func (s *Scale) WatchPorts() (*PortWatch, error) {
	w := &PortWatch{seen: map[uint16]map[string]time.Time{}}
	for _, name := range s.Nodes {
		h, err := netns.GetFromName(name)
		if err != nil {
			w.Stop()
			return nil, err
		}
		w.nss = append(w.nss, h)
		conn, err := nftables.New(nftables.WithNetNSFd(int(h)))
		if err != nil {
			w.Stop()
			return nil, fmt.Errorf("%s: nftables: %w", name, err)
		}
		mon := nftables.NewMonitor(
			nftables.WithMonitorObject(nftables.MonitorObjectRules|nftables.MonitorObjectElements),
			nftables.WithMonitorEventBuffer(4096))
		ch, err := conn.AddGenerationalMonitor(mon)
		if err != nil {
			w.Stop()
			return nil, fmt.Errorf("%s: nftables events: %w", name, err)
		}
		w.mons = append(w.mons, mon)
		w.wg.Add(1)
		go w.consume(name, ch)
	}
	return w, nil
}

func (w *PortWatch) consume(node string, ch <-chan *nftables.MonitorEvents) {
	defer w.wg.Done()
	for evs := range ch {
		now := time.Now()
		for _, ev := range evs.Changes {
			if ev.Type == nftables.MonitorEventTypeOOB {
				w.fail(fmt.Errorf("%s: nftables events: %v", node, ev.Error))
				continue
			}
			if ev.Error != nil {
				continue // a message this library cannot parse holds no port we set
			}
			for _, p := range portsIn(ev) {
				w.mark(p, node, now)
			}
		}
	}
}

// portsIn returns the two-byte values a new rule compares the transport
// header with, or a new set element's two-byte keys.
func portsIn(ev *nftables.MonitorEvent) []uint16 {
	var out []uint16
	switch ev.Type {
	case nftables.MonitorEventTypeNewRule:
		r, _ := ev.Data.(*nftables.Rule)
		if r == nil {
			return nil
		}
		for _, e := range r.Exprs {
			switch x := e.(type) {
			case *expr.Cmp:
				if len(x.Data) == 2 {
					out = append(out, binary.BigEndian.Uint16(x.Data))
				}
			case *expr.Range:
				if len(x.FromData) == 2 && bytes.Equal(x.FromData, x.ToData) {
					out = append(out, binary.BigEndian.Uint16(x.FromData))
				}
			}
		}
	case nftables.MonitorEventTypeNewSetElem:
		els, _ := ev.Data.([]nftables.SetElement)
		for _, el := range els {
			if len(el.Key) == 2 && !el.IntervalEnd {
				out = append(out, binary.BigEndian.Uint16(el.Key))
			}
		}
	}
	return out
}

func (w *PortWatch) mark(port uint16, node string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.seen[port]
	if m == nil {
		m = map[string]time.Time{}
		w.seen[port] = m
	}
	if _, had := m[node]; !had {
		m[node] = at
	}
}

func (w *PortWatch) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs = append(w.errs, err)
}

// Seen returns when each node first had port in its tables.
func (w *PortWatch) Seen(port uint16) map[string]time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]time.Time, len(w.seen[port]))
	for n, t := range w.seen[port] {
		out[n] = t
	}
	return out
}

// Err is the first event error (a lost event, say), if any.
func (w *PortWatch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.errs) > 0 {
		return w.errs[0]
	}
	return nil
}

// Stop ends the subscriptions.
func (w *PortWatch) Stop() {
	for _, m := range w.mons {
		_ = m.Close()
	}
	w.mons = nil
	w.wg.Wait()
	for _, h := range w.nss {
		_ = h.Close()
	}
	w.nss = nil
}
