// Package bgp is routed's BGP speaker: an embedded GoBGP v4 server that
// advertises the local node's IPAM blocks (next hop self: its IPv4 or
// IPv6 address), borrowed /32s and /128s and service CIDRs, and hands the best paths it learns to felix through
// a RouteSink (learned.go), which felix implements.
//
// How the node daemon composes it (routed/daemon/parts.go):
//
//	sp, _ := bgp.New(bgp.Config{NodeName: name, RouteSink: fx, RouteStatus: fx})
//	spc := sp.Consumer()                         // this node's blocks and borrowed addresses
//	nodeFeed.Subscribe("bgp", spc.SubscribedKinds(), spc)
//	cd := confd.New(sp, name)                    // identity, peers, filters
//	nodeFeed.Subscribe("confd", confd.Kinds, cd.Consumer())
//	go sp.Run(ctx)                               // the only goroutine that programs GoBGP
//
// Everything arrives through the node feed (pkg/feed): nothing here reads
// the datastore. A route-reflector-only node passes no RouteSink.
package bgp
