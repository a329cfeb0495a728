package feed

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/ipam"
)

// Resources returns a snapshot batch's resources of kinds, by kind; every
// kind asked for has an entry, empty when none exists.
func (b Batch) Resources(kinds []api.Kind) map[api.Kind][]api.Resource {
	out := make(map[api.Kind][]api.Resource, len(kinds))
	for _, k := range kinds {
		out[k] = nil
	}
	for _, u := range b.Updates {
		if _, ok := out[u.Kind]; ok && u.Resource != nil {
			out[u.Kind] = append(out[u.Kind], u.Resource)
		}
	}
	return out
}

// Unreadable returns a snapshot batch's records of kinds that did not
// decode (reported for ReportUnreadable's kinds), in key order.
func (b Batch) Unreadable(kinds []api.Kind) []Update {
	var out []Update
	for _, u := range b.Updates {
		if u.Unreadable != nil && slices.Contains(kinds, u.Kind) {
			out = append(out, u)
		}
	}
	return out
}

// Affinities returns a snapshot batch's block affinities, sorted by node
// and block.
func (b Batch) Affinities() []ipam.Affinity {
	var out []ipam.Affinity
	for _, u := range b.Updates {
		if u.Kind == KindAffinity {
			out = append(out, u.Affinity)
		}
	}
	slices.SortFunc(out, func(x, y ipam.Affinity) int {
		if c := strings.Compare(x.Node, y.Node); c != 0 {
			return c
		}
		return x.CIDR.Addr().Compare(y.CIDR.Addr())
	})
	return out
}

// Borrowed returns a snapshot batch's borrowed addresses, per block.
func (b Batch) Borrowed() map[netip.Prefix]map[netip.Addr]string {
	out := map[netip.Prefix]map[netip.Addr]string{}
	for _, u := range b.Updates {
		if u.Kind == KindBorrowed && len(u.Borrowed) > 0 {
			out[u.Block] = u.Borrowed
		}
	}
	return out
}

// Dispatch is a Consumer that hands a batch, in order, to the handlers a
// component already has: resource snapshots and changes, affinities and
// borrowed addresses. Nil handlers are skipped.
type Dispatch struct {
	// Kinds are the resource kinds Resources takes (a snapshot replaces
	// exactly these).
	Kinds      []api.Kind
	Resources  ResourceHandler
	Affinities ipam.AffinityHandler
	Borrowed   ipam.BorrowHandler
}

// ResourceHandler takes resources: a snapshot replaces everything of its
// kinds; then single changes.
type ResourceHandler interface {
	ReplaceResources(map[api.Kind][]api.Resource)
	SetResource(api.Resource)
	DeleteResource(k api.Kind, name string)
}

// EncodedHandler is a ResourceHandler that takes a snapshot's undecoded
// objects (Undecoded) as they are: rs holds the decoded kinds (every
// kind of the snapshot has an entry, the undecoded ones' empty), enc the
// undecoded objects, which it decodes itself (DecodeEach) to replace
// everything of rs's kinds. Their unreadable objects of reported kinds
// are its to find (DecodeEachReporting): ReplaceUnreadable does not get
// them.
type EncodedHandler interface {
	ReplaceEncoded(rs map[api.Kind][]api.Resource, enc []Encoded)
}

// UnreadableHandler is a ResourceHandler that takes the records that do
// not decode (the subscription's ReportUnreadable kinds). With a
// snapshot, ReplaceUnreadable gets every such record of its kinds, after
// the snapshot's resources (an unreadable record is not among them);
// later, SetUnreadable gets a record that stopped decoding, and
// SetResource or DeleteResource of its kind and name ends it.
// Without one, Dispatch skips unreadable records.
type UnreadableHandler interface {
	ReplaceUnreadable([]Update)
	SetUnreadable(Update)
}

// SubscribedKinds is every kind d needs from the feed.
func (d Dispatch) SubscribedKinds() []api.Kind {
	kinds := slices.Clone(d.Kinds)
	if d.Affinities != nil {
		kinds = append(kinds, KindAffinity)
	}
	if d.Borrowed != nil {
		kinds = append(kinds, KindBorrowed)
	}
	return kinds
}

// OnBatch implements Consumer.
func (d Dispatch) OnBatch(b Batch) {
	if b.Snapshot {
		if d.Resources != nil {
			bad := d.replace(b)
			if h, ok := d.Resources.(UnreadableHandler); ok {
				h.ReplaceUnreadable(append(b.Unreadable(d.Kinds), bad...))
			}
		}
		if d.Affinities != nil {
			d.Affinities.OnAffinitySnapshot(b.Affinities())
		}
		if d.Borrowed != nil {
			d.Borrowed.OnBorrowedSnapshot(b.Borrowed())
		}
		return
	}
	for _, u := range b.Updates {
		switch u.Kind {
		case KindAffinity:
			if d.Affinities != nil {
				d.Affinities.OnAffinityUpdate(u.Affinity, u.Deleted)
			}
		case KindBorrowed:
			if d.Borrowed != nil {
				d.Borrowed.OnBorrowedBlock(u.Block, u.Borrowed)
			}
		default:
			if d.Resources == nil {
				continue
			}
			switch {
			case u.Deleted:
				d.Resources.DeleteResource(u.Kind, u.Name)
			case u.Unreadable != nil:
				if h, ok := d.Resources.(UnreadableHandler); ok {
					h.SetUnreadable(u)
				}
			default:
				d.Resources.SetResource(u.Resource)
			}
		}
	}
}

// replace hands a snapshot's resources to the handler: its undecoded
// objects undecoded when the handler takes them so (it finds their
// unreadable ones itself), else decoded here; it returns those of the
// reported kinds (ReportUnreadable) that it found unreadable.
func (d Dispatch) replace(b Batch) []Update {
	rs := b.Resources(d.Kinds)
	if len(b.Encoded) == 0 {
		d.Resources.ReplaceResources(rs)
		return nil
	}
	if h, ok := d.Resources.(EncodedHandler); ok {
		h.ReplaceEncoded(rs, b.Encoded)
		return nil
	}
	var bad []Update
	DecodeEachReporting(b.Encoded, func(r api.Resource) {
		if list, ok := rs[r.GetKind()]; ok {
			rs[r.GetKind()] = append(list, r)
		}
	}, func(u Update) {
		if slices.Contains(d.Kinds, u.Kind) {
			bad = append(bad, u)
		}
	})
	d.Resources.ReplaceResources(rs)
	return bad
}
