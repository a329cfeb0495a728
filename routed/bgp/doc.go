// Package bgp is routed's BGP speaker: an embedded GoBGP v4 server that
// advertises the local node's IPAM blocks (next hop self: its IPv4 or
// IPv6 address), borrowed /32s and /128s and service CIDRs, and hands the best paths it learns to felix through
// a RouteSink (learned.go), which felix implements.
//
// How a daemon composes it (see README.md for the model):
//
//	sp, _ := bgp.New(bgp.Config{NodeName: name, RouteSink: fx, RouteStatus: fx,
//		BorrowedIPs: func(ctx context.Context) ([]netip.Addr, error) { return ipamc.BorrowedIPs(ctx, name) }})
//	go sp.Run(ctx)                                   // programs GoBGP
//	go confd.New(ds, sp, name).Run(ctx)              // identity and peers
//	go ipam.WatchAffinities(ctx, ds, sp)             // blocks to advertise
//	go status.NewServer(status.SocketPath(flag), sp).Run(ctx) // routedctl node status
//
// A route-reflector-only node passes no RouteSink and calls
// sp.OnAffinitySnapshot(nil) instead of watching IPAM.
package bgp
