package controllers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// Taking over Calico's automatic host endpoints fails closed both ways.
//
// Taking one over rewrites it from the Kubernetes Node. Calico may have
// given it more: labels only the Calico Node had (from etcd,
// `calicoctl label node`), its tunnel and BGP addresses in expectedIPs.
// Dropping a label un-selects the host from the policies that select it
// by that label (a Deny no longer applies); dropping an address makes
// policies matching the endpoint as a source or destination miss it. So
// an endpoint whose takeover would remove a label (or change its value)
// or an expected IP is not taken over: it stays as Calico wrote it,
// policing, and a warning (once per difference, also as a Warning event
// on the Node) names what differs. Once the Node carries those labels,
// it is taken over.
//
// Taken over, an endpoint is marked AdoptedAnnotation. With the feature
// off it is released (ownership removed, the endpoint kept, policing as
// last written) instead of deleted: the controllers did not create it,
// and removing it would leave its host unpoliced. The endpoints the
// controllers created themselves are removed when off, as Calico's are.

// AdoptedAnnotation, set to CalicoCreatedByValue, marks a host endpoint
// the controllers took over from Calico's kube-controllers.
const AdoptedAnnotation = "routed.io/adopted-from"

// EventReasonNotTakenOver is the reason of the Warning event recorded on
// a Node whose Calico automatic host endpoint is not taken over because
// that would remove labels or expected IPs.
const EventReasonNotTakenOver = "HostEndpointNotTakenOver"

// TakeoverLoss is what rewriting a host endpoint as another would
// remove.
type TakeoverLoss struct {
	// Labels are "key=value" the rewrite drops, or "key=value (would
	// become other)" where it changes the value; sorted.
	Labels []string
	// ExpectedIPs are the addresses the rewrite drops.
	ExpectedIPs []string
}

// Empty reports whether nothing would be removed.
func (l TakeoverLoss) Empty() bool { return len(l.Labels)+len(l.ExpectedIPs) == 0 }

// String names what would be removed.
func (l TakeoverLoss) String() string {
	var parts []string
	if len(l.Labels) > 0 {
		parts = append(parts, "labels "+strings.Join(l.Labels, ", "))
	}
	if len(l.ExpectedIPs) > 0 {
		parts = append(parts, "expectedIPs "+strings.Join(l.ExpectedIPs, ", "))
	}
	return strings.Join(parts, "; ")
}

// TakeoverLosses is what writing want over cur would remove: labels of
// cur that want lacks or gives another value, and cur's expectedIPs
// that want lacks.
func TakeoverLosses(cur, want *api.HostEndpoint) TakeoverLoss {
	return TakeoverLoss{Labels: LabelLosses(cur.Metadata.Labels, want.Metadata.Labels),
		ExpectedIPs: slices.DeleteFunc(slices.Clone(cur.Spec.ExpectedIPs), func(a string) bool { return slices.Contains(want.Spec.ExpectedIPs, a) })}
}

// LabelLosses lists, sorted, the labels of have that want lacks
// ("key=value") or gives another value ("key=value (would become
// other)").
func LabelLosses(have, want map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(have)) {
		w, ok := want[k]
		switch {
		case !ok:
			out = append(out, k+"="+have[k])
		case w != have[k]:
			out = append(out, fmt.Sprintf("%s=%s (would become %s)", k, have[k], w))
		}
	}
	return out
}

// takeOver is ensureAdopting's adopt for node's automatic host
// endpoint: the controllers' own is written over (an adopted one keeps
// its mark); Calico's (fromCalico) is adopted unless that would remove
// anything; anything else is left alone. refused holds the difference
// last warned about per endpoint; only the automatic host endpoints'
// worker goroutine uses it.
func (s *syncer) takeOver(node *corev1.Node, refused map[string]string) func(cur, want api.Resource) bool {
	return func(cur, want api.Resource) bool {
		c, ok1 := cur.(*api.HostEndpoint)
		w, ok2 := want.(*api.HostEndpoint)
		if !ok1 || !ok2 {
			return false
		}
		name := c.Metadata.Name
		fields := logrus.Fields{"kind": api.KindHostEndpoint, "name": name}
		if IsOwned(c) {
			if from := c.Metadata.Annotations[AdoptedAnnotation]; from != "" {
				w.Metadata.Annotations[AdoptedAnnotation] = from
			}
			delete(refused, name)
			return true
		}
		if !fromCalico(c) {
			log.WithFields(fields).Warn("an object of this name was not written by the controllers; leaving it alone")
			return false
		}
		if loss := TakeoverLosses(c, w); !loss.Empty() {
			if why := loss.String(); refused[name] != why {
				refused[name] = why
				hint := "routed-controllers give only the Node's InternalIP and ExternalIP addresses"
				if len(loss.Labels) > 0 {
					hint = "give the Kubernetes Node those labels to let routed-controllers take it over"
				}
				msg := fmt.Sprintf("Calico's automatic host endpoint %s is not taken over: that would remove its %s, which policies may select or match; "+
					"it keeps policing as Calico wrote it (%s)", name, why, hint)
				log.WithFields(fields).WithField("lost", why).Warn(msg)
				if s.recorder != nil {
					s.recorder.Event(node, corev1.EventTypeWarning, EventReasonNotTakenOver, msg)
				}
			}
			return false
		}
		delete(refused, name)
		w.Metadata.Annotations[AdoptedAnnotation] = CalicoCreatedByValue
		log.WithFields(fields).Info("taking over Calico's automatic host endpoint")
		return true
	}
}

// autoHostEndpointsOff is the feature off: the automatic host endpoints
// the controllers created are removed; those they took over from
// Calico (AdoptedAnnotation) are released, not removed.
func (s *syncer) autoHostEndpointsOff(ctx context.Context) error {
	list, _, err := s.store.List(ctx, api.KindHostEndpoint)
	if err != nil {
		return fmt.Errorf("list hostendpoints: %w", err)
	}
	var errs []error
	for _, r := range list {
		h := r.(*api.HostEndpoint)
		if !strings.HasSuffix(h.Metadata.Name, AutoHostEndpointSuffix) || !IsOwned(h) {
			continue
		}
		if h.Metadata.Annotations[AdoptedAnnotation] != "" {
			err = s.release(ctx, h.Metadata.Name)
		} else {
			err = s.deleteOwned(ctx, api.KindHostEndpoint, h.Metadata.Name)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// release removes the controllers' ownership (and the adoption mark)
// from the host endpoint name they took over, leaving it as last
// written: it keeps policing its host, and turned on again, the
// controllers take it over again. Gone, or no longer theirs, is done.
func (s *syncer) release(ctx context.Context, name string) error {
	for attempt := 1; ; attempt++ {
		cur, err := s.store.Get(ctx, api.KindHostEndpoint, name)
		if datastore.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("release HostEndpoint %s: %w", name, err)
		}
		m := cur.Meta()
		if !IsOwned(cur) || m.Annotations[AdoptedAnnotation] == "" {
			return nil
		}
		delete(m.Annotations, OwnerAnnotation)
		delete(m.Annotations, SourceAnnotation)
		delete(m.Annotations, AdoptedAnnotation)
		if len(m.Annotations) == 0 {
			m.Annotations = nil
		}
		_, err = s.store.Update(ctx, cur)
		if err == nil {
			log.WithFields(logrus.Fields{"kind": api.KindHostEndpoint, "name": name}).
				Info("released: automatic host endpoints are off, and this one was taken over from Calico; it stays, policing as last written")
			return nil
		}
		if !errors.Is(err, datastore.ErrConflict) || attempt == 3 {
			return fmt.Errorf("release HostEndpoint %s: %w", name, err)
		}
	}
}
