// Package reimport puts back into the datastore the pods a node runs
// that the datastore has lost, typically because etcd was restored from
// a snapshot taken before they started; and takes out of it this node's
// pods that no longer run here (deleted after the snapshot, brought back
// by the restore).
//
// The node is the truth for its own pods: a pod is live when routed's
// last trusted view of the datastore (felix's endpoints) names it and its
// host interface still exists in the kernel. Nothing else is trusted: a
// host interface without an endpoint routed ever saw is not imported.
//
// Invariant: writes happen only while the node holds (routed/identity):
// CNI ADD and DEL are refused on the node then, so no pod is half made
// or half deleted, and "live but missing" can only mean "lost".
package reimport

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

var log = logrus.WithField("component", "reimport")

// ErrNotHeld: a re-import that writes needs the node to hold (the
// datastore not trusted); while it follows the datastore, a pod missing
// from it may be one being deleted.
var ErrNotHeld = errors.New("reimport: this node follows the datastore (it does not hold); only --dry-run is allowed")

// Config is what a Reimporter needs.
type Config struct {
	DS   *datastore.Client
	IPAM *ipam.Client
	Node string
	// Endpoints returns this node's endpoints as routed last trusted them.
	Endpoints func(ctx context.Context) ([]*api.WorkloadEndpoint, error)
	// LinkExists reports whether a host interface exists now.
	LinkExists func(name string) bool
	// Held reports whether the node holds (routed/identity's Frozen).
	Held func() (bool, string)
}

// Entry is one pod interface in a Report.
type Entry struct {
	Endpoint  string   `json:"endpoint"`
	Namespace string   `json:"namespace,omitempty"`
	Pod       string   `json:"pod,omitempty"`
	Interface string   `json:"interface"`
	Handle    string   `json:"handle,omitempty"`
	Addresses []string `json:"addresses"`
	// Problem says why the entry could not be imported or removed.
	Problem string `json:"problem,omitempty"`
}

// Report is what a re-import found and did.
type Report struct {
	Node   string `json:"node"`
	DryRun bool   `json:"dryRun"`
	// Held and Why: whether the node holds, and why.
	Held bool   `json:"held"`
	Why  string `json:"why,omitempty"`
	// Live counts this node's live pod interfaces.
	Live int `json:"live"`
	// Missing are live pods the datastore lacks (an endpoint, or an
	// address held for it): imported unless DryRun.
	Missing []Entry `json:"missing,omitempty"`
	// Stale are this node's endpoints in the datastore whose host
	// interface does not exist: removed unless DryRun.
	Stale []Entry `json:"stale,omitempty"`
	// Failed are entries that could not be written, with the problem.
	Failed []Entry `json:"failed,omitempty"`
	// Outside are live pods with an address in no pool of the datastore
	// (a wiped one, or a pool deleted): IPAM cannot give that address to
	// another pod, so they are not a failure; their endpoints are not
	// written (felix would route them again only once a pool has them).
	Outside []Entry `json:"outside,omitempty"`
}

// Problems counts what is wrong on the node after the run: everything
// found on a dry run, what failed otherwise.
func (r *Report) Problems() int {
	if r.DryRun {
		return len(r.Missing) + len(r.Stale)
	}
	return len(r.Failed)
}

// Reimporter reconciles one node's pods into the datastore.
type Reimporter struct{ cfg Config }

// New returns a Reimporter.
func New(cfg Config) *Reimporter { return &Reimporter{cfg: cfg} }

// Run compares the node's live pods with the datastore and, unless
// dryRun, writes the difference: stale endpoints first (their addresses
// released), then each missing pod's addresses (to its own handle) and
// endpoint. It is idempotent; a pod whose address another holder has is
// left out and reported in Failed.
func (r *Reimporter) Run(ctx context.Context, dryRun bool) (*Report, error) {
	return r.run(ctx, dryRun, nil)
}

// Apply is Run writing the difference; planned, when not nil, is told
// what will be written (Missing, Stale) before the first write, so that
// a node holding meanwhile can say what it is doing. Every etcd request
// runs under ctx: cancelling it stops Apply between writes (what was
// written stays; a later run finds it).
func (r *Reimporter) Apply(ctx context.Context, planned func(*Report)) (*Report, error) {
	return r.run(ctx, false, planned)
}

func (r *Reimporter) run(ctx context.Context, dryRun bool, planned func(*Report)) (*Report, error) {
	held, why := r.cfg.Held()
	rep := &Report{Node: r.cfg.Node, DryRun: dryRun, Held: held, Why: why}
	if !dryRun && !held {
		return rep, ErrNotHeld
	}
	mine, err := r.cfg.Endpoints(ctx)
	if err != nil {
		return nil, fmt.Errorf("reimport: this node's endpoints: %w", err)
	}
	live := map[string]*api.WorkloadEndpoint{}
	for _, w := range mine {
		if w.Spec.Node == r.cfg.Node && r.cfg.LinkExists(w.Spec.InterfaceName) {
			live[w.Metadata.Name] = w
		}
	}
	rep.Live = len(live)
	stored, err := r.storedEndpoints(ctx)
	if err != nil {
		return nil, err
	}
	for _, name := range sortedKeys(live) {
		w := live[name]
		if ok, err := r.recorded(ctx, w, stored[name]); err != nil {
			return nil, err
		} else if !ok {
			rep.Missing = append(rep.Missing, entry(w))
		}
	}
	for _, name := range sortedKeys(stored) {
		if _, ok := live[name]; !ok && !r.cfg.LinkExists(stored[name].Spec.InterfaceName) {
			rep.Stale = append(rep.Stale, entry(stored[name]))
		}
	}
	if dryRun {
		return rep, nil
	}
	if planned != nil {
		planned(rep)
	}
	for _, e := range rep.Stale {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reimport: %w", err)
		}
		if err := r.remove(ctx, stored[e.Endpoint]); err != nil {
			e.Problem = err.Error()
			rep.Failed = append(rep.Failed, e)
		}
	}
	for _, e := range rep.Missing {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reimport: %w", err)
		}
		err := r.restore(ctx, live[e.Endpoint])
		switch {
		case errors.Is(err, ipam.ErrNotInPool):
			e.Problem = err.Error()
			rep.Outside = append(rep.Outside, e)
		case err != nil:
			e.Problem = err.Error()
			rep.Failed = append(rep.Failed, e)
		}
	}
	log.WithFields(logrus.Fields{"live": rep.Live, "imported": len(rep.Missing), "removed": len(rep.Stale), "failed": len(rep.Failed)}).
		Warn("re-imported this node's pods into the datastore")
	return rep, nil
}

// storedEndpoints reads this node's endpoints from the datastore.
func (r *Reimporter) storedEndpoints(ctx context.Context) (map[string]*api.WorkloadEndpoint, error) {
	all, _, err := r.cfg.DS.List(ctx, api.KindWorkloadEndpoint)
	if err != nil {
		return nil, fmt.Errorf("reimport: list endpoints: %w", err)
	}
	out := map[string]*api.WorkloadEndpoint{}
	for _, res := range all {
		if w, ok := res.(*api.WorkloadEndpoint); ok && w.Spec.Node == r.cfg.Node {
			out[w.Metadata.Name] = w
		}
	}
	return out, nil
}

// recorded reports whether the datastore holds w: its endpoint, for the
// same container, and each address held by w's handle.
func (r *Reimporter) recorded(ctx context.Context, w, stored *api.WorkloadEndpoint) (bool, error) {
	if stored == nil || stored.Spec.ContainerID != w.Spec.ContainerID {
		return false, nil
	}
	for _, a := range addresses(w) {
		al, err := r.cfg.IPAM.IPInfo(ctx, a)
		switch {
		case errors.Is(err, ipam.ErrNotAllocated), errors.Is(err, ipam.ErrNotInPool):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("reimport: who holds %s: %w", a, err)
		case al.Handle != w.Spec.Handle:
			return false, nil
		}
	}
	return true, nil
}

// restore assigns w's addresses to its handle and writes its endpoint.
func (r *Reimporter) restore(ctx context.Context, w *api.WorkloadEndpoint) error {
	if w.Spec.Handle == "" {
		return errors.New("the endpoint names no IPAM handle")
	}
	attrs := ipam.Attributes{Namespace: w.Spec.Namespace, Pod: w.Spec.Pod}
	for _, a := range addresses(w) {
		if err := r.cfg.IPAM.AssignIP(ctx, a, w.Spec.Handle, r.cfg.Node, attrs); err != nil {
			return fmt.Errorf("address %s: %w", a, err)
		}
	}
	c := *w
	c.Metadata.ResourceVersion = ""
	if _, err := r.cfg.DS.Apply(ctx, &c); err != nil {
		return fmt.Errorf("endpoint: %w", err)
	}
	return nil
}

// remove releases a stale endpoint's handle and deletes the endpoint.
func (r *Reimporter) remove(ctx context.Context, w *api.WorkloadEndpoint) error {
	if w.Spec.Handle != "" {
		if _, err := r.cfg.IPAM.ReleaseByHandle(ctx, w.Spec.Handle); err != nil && !errors.Is(err, ipam.ErrNotAllocated) {
			return fmt.Errorf("release %s: %w", w.Spec.Handle, err)
		}
	}
	err := r.cfg.DS.Delete(ctx, api.KindWorkloadEndpoint, w.Metadata.Name, w.Metadata.ResourceVersion)
	if err != nil && !datastore.IsNotFound(err) {
		return fmt.Errorf("delete endpoint: %w", err)
	}
	return nil
}

func addresses(w *api.WorkloadEndpoint) []netip.Addr {
	var out []netip.Addr
	for _, n := range w.Spec.IPNetworks {
		if p, err := netip.ParsePrefix(n); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out
}

func entry(w *api.WorkloadEndpoint) Entry {
	e := Entry{Endpoint: w.Metadata.Name, Namespace: w.Spec.Namespace, Pod: w.Spec.Pod,
		Interface: w.Spec.InterfaceName, Handle: w.Spec.Handle}
	for _, a := range addresses(w) {
		e.Addresses = append(e.Addresses, a.String())
	}
	return e
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return slices.Clip(out)
}
