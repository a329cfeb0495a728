package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/routed-net/routed/pkg/api"
)

// Calico's kube-controllers can create a host endpoint for every
// Kubernetes node ("autoCreate"): interface "*", the node's labels, its
// addresses, and the profile projectcalico-default-allow, which allows
// everything, so that turning it on changes no verdict until a policy
// selects the endpoints. Each goes with its node; turning it off removes
// them. Only what the controllers wrote (OwnerAnnotation) is changed or
// removed: a host endpoint written by hand under the same name is left.
//
// One exception, for clusters moved from Calico (routedctl migrate
// calico): while on, an unowned "<node>-auto-hep" carrying Calico's
// CalicoCreatedByLabel is Calico's kube-controllers' own, carried as it
// was, and is adopted (rewritten as the controllers' own, marked
// AdoptedAnnotation) unless that would remove a label or an expected IP
// (hostendpoint_takeover.go), or, its node gone, removed. While off it
// is left alone like any other: it keeps policing its host as Calico
// wrote it (failing closed), rather than being removed by a controller
// that never wrote it; one adopted earlier is released, not removed.

// AutoHostEndpointSuffix ends the name of a node's automatic host
// endpoint: "<node>-auto-hep", as Calico names it.
const AutoHostEndpointSuffix = "-auto-hep"

// CalicoCreatedByLabel, set to CalicoCreatedByValue, marks the host
// endpoints Calico's kube-controllers create. The controllers set it on
// theirs too, so that a policy selecting Calico's automatic host
// endpoints by it selects routed's.
const (
	CalicoCreatedByLabel = "projectcalico.org/created-by"
	CalicoCreatedByValue = "calico-kube-controllers"
)

// AutoHostEndpoint is the automatic host endpoint of a node, labelled
// as Calico labels it: the node's labels and CalicoCreatedByLabel.
func AutoHostEndpoint(n *corev1.Node) *api.HostEndpoint {
	h := &api.HostEndpoint{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindHostEndpoint},
		Metadata: api.ObjectMeta{Name: n.Name + AutoHostEndpointSuffix},
		Spec:     api.HostEndpointSpec{Node: n.Name, InterfaceName: api.AllInterfaces, Profiles: []string{api.DefaultAllowProfile}}}
	owned(&h.Metadata, n.Name)
	h.Metadata.Labels = map[string]string{}
	for k, v := range n.Labels {
		h.Metadata.Labels[k] = v
	}
	h.Metadata.Labels[CalicoCreatedByLabel] = CalicoCreatedByValue
	for _, a := range n.Status.Addresses {
		if (a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP) && !slices.Contains(h.Spec.ExpectedIPs, a.Address) {
			h.Spec.ExpectedIPs = append(h.Spec.ExpectedIPs, a.Address)
		}
	}
	return h
}

// DefaultAllowProfile is Calico's projectcalico-default-allow: allow
// everything in both directions.
func DefaultAllowProfile() *api.Profile {
	p := &api.Profile{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindProfile},
		Metadata: api.ObjectMeta{Name: api.DefaultAllowProfile},
		Spec:     api.ProfileSpec{Ingress: []api.Rule{{Action: api.ActionAllow}}, Egress: []api.Rule{{Action: api.ActionAllow}}}}
	owned(&p.Metadata, api.DefaultAllowProfile)
	return p
}

// autoHostEndpoints keeps one automatic host endpoint per node while on
// (and while off removes those it created and releases those it took
// over) until ctx ends, with a queue and a Node informer of its own.
func (s *syncer) autoHostEndpoints(ctx context.Context, on bool) error {
	if !on {
		return s.autoHostEndpointsOff(ctx)
	}
	f := informers.NewSharedInformerFactory(s.kube, 0)
	inf := f.Core().V1().Nodes().Informer()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	enqueue := func(o any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o); err == nil {
			q.Add(key)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue,
		UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue}); err != nil {
		return err
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("controllers: node informer did not sync: %w", ctx.Err())
	}
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	nodes := inf.GetIndexer()
	refused := map[string]string{} // the worker's own: see takeOver
	go func() {
		for {
			// Nodes deleted while no controller ran: their endpoints go.
			err := s.removeAutoHostEndpoints(ctx, func(node string) bool {
				_, ok, err := nodes.GetByKey(node)
				return err == nil && ok
			})
			if err != nil {
				log.WithError(err).Warn("automatic host endpoints: resync incomplete")
			}
			for _, k := range nodes.ListKeys() {
				q.Add(k)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(s.resync):
			}
		}
	}()
	for {
		name, quit := q.Get()
		if quit {
			return ctx.Err()
		}
		err := s.syncAutoHostEndpoint(ctx, nodes, name, refused)
		if err != nil && ctx.Err() == nil {
			log.WithError(err).WithField("node", name).Warn("automatic host endpoint: sync failed; retrying")
			q.AddRateLimited(name)
		} else {
			q.Forget(name)
		}
		q.Done(name)
	}
}

// syncAutoHostEndpoint makes a node's automatic host endpoint (and the
// profile it names) match the node, or go with it. refused is takeOver's.
func (s *syncer) syncAutoHostEndpoint(ctx context.Context, nodes cache.Indexer, name string, refused map[string]string) error {
	o, ok, err := nodes.GetByKey(name)
	if err != nil {
		return err
	}
	if !ok {
		delete(refused, name+AutoHostEndpointSuffix)
		return s.deleteAdopting(ctx, api.KindHostEndpoint, name+AutoHostEndpointSuffix, fromCalico)
	}
	// The profile first: an endpoint naming a profile that does not
	// exist would deny everything.
	if err := s.ensure(ctx, DefaultAllowProfile()); err != nil {
		return fmt.Errorf("profile %s: %w", api.DefaultAllowProfile, err)
	}
	n := o.(*corev1.Node)
	return s.ensureAdopting(ctx, AutoHostEndpoint(n), s.takeOver(n, refused))
}

// fromCalico reports whether r, not written by the controllers, is the
// automatic host endpoint of a node Calico's kube-controllers wrote
// (carried by routedctl migrate calico): "<node>-auto-hep" for its
// node, on "*", with Calico's label. The controllers adopt it while on
// (unless takeOver finds that would remove something).
// Those Calico made from templates ("<node>-<template>[-<interface>]-auto-hep",
// not on "*") are never adopted: routed has no templates.
func fromCalico(r api.Resource) bool {
	h, ok := r.(*api.HostEndpoint)
	return ok && !IsOwned(h) && h.Metadata.Name == h.Spec.Node+AutoHostEndpointSuffix &&
		h.Spec.InterfaceName == api.AllInterfaces && h.Metadata.Labels[CalicoCreatedByLabel] == CalicoCreatedByValue
}

// removeAutoHostEndpoints deletes the automatic host endpoints the
// controllers wrote or took over, and Calico's they would take over,
// but those of nodes keep reports as present.
func (s *syncer) removeAutoHostEndpoints(ctx context.Context, keep func(node string) bool) error {
	list, _, err := s.store.List(ctx, api.KindHostEndpoint)
	if err != nil {
		return fmt.Errorf("list hostendpoints: %w", err)
	}
	for _, r := range list {
		h := r.(*api.HostEndpoint)
		node, ok := strings.CutSuffix(h.Metadata.Name, AutoHostEndpointSuffix)
		if !ok || !(IsOwned(h) || fromCalico(h)) || keep(node) {
			continue
		}
		if err := s.deleteAdopting(ctx, api.KindHostEndpoint, h.Metadata.Name, fromCalico); err != nil {
			return err
		}
	}
	return nil
}
