package bgp

import (
	"context"
	"fmt"
)

// Readiness says whether BGP can carry this node's routes, as Calico's
// BIRD readiness does. Never before confd has configured the speaker
// (its identity and the list of sessions). Then:
//
//   - a node that reflects routes to clients is ready while at least one
//     of its sessions is Established: one client restarting must not
//     take a reflector out of service for every other client;
//   - any other node is ready when every configured session is
//     Established (a node with no sessions, such as the only node of a
//     mesh, is ready).
func (s *Speaker) Readiness(ctx context.Context) (bool, string) {
	w := s.want.snapshot()
	if _, problem := s.want.pending(); problem != "" && !w.peersSet {
		return false, "BGP not configured: " + problem
	}
	if w.global == nil || !w.global.Valid() {
		return false, "BGP not configured yet (no AS number or router ID from the datastore)"
	}
	if !w.peersSet {
		return false, "BGP sessions not configured yet"
	}
	reflector := false
	for _, p := range w.peers {
		reflector = reflector || p.RRClient
	}
	peers, err := s.Peers(ctx)
	if err != nil {
		return false, err.Error()
	}
	up := 0
	for _, p := range peers {
		if p.Established() {
			up++
		}
	}
	switch {
	case len(w.peers) == 0:
		return true, "no BGP sessions configured"
	case reflector && up > 0:
		return true, fmt.Sprintf("route reflector: %d of %d sessions established", up, len(w.peers))
	case reflector:
		return false, fmt.Sprintf("route reflector: none of %d sessions established", len(w.peers))
	case up < len(w.peers):
		return false, fmt.Sprintf("%d of %d sessions established", up, len(w.peers))
	}
	return true, fmt.Sprintf("%d sessions established", up)
}
