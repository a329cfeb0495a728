package felix

import (
	"slices"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/feed"
)

// UnreadableKinds are the policy kinds whose stored records that do not
// decode felix denies for (policy.UnreadableKinds).
var UnreadableKinds = policy.UnreadableKinds

// ReplaceUnreadable implements feed.UnreadableHandler: us are every
// unreadable record of a snapshot (after its resources).
func (f *Felix) ReplaceUnreadable(us []feed.Update) {
	f.enqueue(func(l *loop) {
		if l.policy == nil {
			return
		}
		now := map[string]bool{}
		for _, u := range us {
			now[policy.UnreadableKey(u.Kind, u.Name)] = true
		}
		// What the snapshot no longer reports goes (a record it has,
		// readable, was set, which ended its deny already; one felix
		// refused keeps the deny its set gave it).
		for _, r := range l.policy.Unreadable() {
			key := policy.UnreadableKey(r.Kind, r.Name)
			if r.Kind == api.KindWorkloadEndpoint {
				continue // the snapshot's endpoints, undecoded, said (policyReplace)
			}
			if l.undecodable[key] && !now[key] {
				delete(l.undecodable, key)
				if r.Kind == api.KindHostEndpoint {
					// What stands in its place goes too.
					l.policyDelete(r.Kind, r.Name)
				}
				l.policy.ClearUnreadable(r.Kind, r.Name)
				f.flows.delete(r.Kind, r.Name)
				l.policyDirty = true
			}
		}
		for _, u := range us {
			l.policyUnreadable(u)
			l.undecodable[policy.UnreadableKey(u.Kind, u.Name)] = true
			f.flows.unreadableUpdate(u)
		}
		l.noteUnreadable()
	})
}

// SetUnreadable implements feed.UnreadableHandler: a record that
// stopped decoding.
func (f *Felix) SetUnreadable(u feed.Update) {
	f.enqueue(func(l *loop) {
		l.policyUnreadable(u)
		if l.policy != nil {
			l.undecodable[policy.UnreadableKey(u.Kind, u.Name)] = true
		}
		f.flows.unreadableUpdate(u)
		l.noteUnreadable()
	})
}

// UnreadableRecords lists the records felix denies for because they do
// not decode (empty: none; nil before the first snapshot or without
// policy).
func (f *Felix) UnreadableRecords() []policy.UnreadableRecord {
	if p := f.unreadable.Load(); p != nil {
		return *p
	}
	return nil
}

// policyUnreadable hands the policy dataplane a record of a policy kind
// that does not decode: its previous version goes (it is not the
// record's any more) and a deny stands for it.
func (l *loop) policyUnreadable(u feed.Update) {
	switch u.Kind {
	case api.KindHostEndpoint:
		l.hostUnreadable(u.Name, salvageHost(u.Name, u.Value), u.Unreadable)
		return
	case api.KindWorkloadEndpoint:
		l.endpointUnreadable(u.Name, l.knownAddrs(u.Name), policy.SalvageEndpointAddrs(u.Value), u.Unreadable)
		return
	}
	if l.policy == nil || !slices.Contains(UnreadableKinds, u.Kind) {
		return
	}
	l.policyDelete(u.Kind, u.Name)
	lg := l.log.WithError(u.Unreadable).WithField("kind", u.Kind).WithField("name", u.Name)
	if err := l.policy.SetUnreadable(u.Kind, u.Name, u.Unreadable); err != nil {
		lg.WithField("reason", err.Error()).Error("a stored policy record cannot be used (it does not decode, or felix refused it) and no deny could stand for it")
		return
	}
	lg.Error("a stored policy record cannot be used (it does not decode, or felix refused it): the traffic it could decide is denied until it is fixed or deleted (routedctl policy unreadable)")
	l.policyDirty = true
}

// noteUnreadable publishes the unreadable records for status and
// metrics.
func (l *loop) noteUnreadable() {
	if l.policy == nil || l.f == nil { // l.f: nil in a loop of its own (tests)
		return
	}
	list := l.policy.Unreadable()
	l.f.unreadable.Store(&list)
}
