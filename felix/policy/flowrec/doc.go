// Package flowrec records every connection to or from a local pod with
// the policy verdict the kernel gave it and the trace of tiers,
// policies and rules that decided it, on each node.
//
// The kernel says what it decided: with policy.LogConfig.FlowGroup set,
// every deciding rule (Allow, Deny, Pass, a tier's or the profiles' end)
// also sends what it decides to a rate-limited nflog with prefix
// "F <token>" before its verdict (through a small chain of its own, so
// that its matches are evaluated once and a packet over the limit still
// gets its verdict: felix/policy/nftdp/tail.go). Policy chains only
// see a connection's first packet (established traffic is accepted
// before them), so nothing of accepted established traffic reaches
// userspace. Connection tracking gives the start (NEW), the end and
// the packets and bytes each way (DESTROY, with nf_conntrack_acct on).
// A denied connection has no conntrack entry: its drop's mark is the
// record.
//
// The Collector owns all state on one goroutine: the connections seen
// in the last moments (waiting for their marks, which the kernel
// flushes every 100 ms), the open ones (by the class they belong to:
// ends, port, verdict, trace, so a flood of connections alike costs a
// map entry each) and the groups of the current interval. Each
// interval it hands a Batch of aggregated flows to its sinks (the
// JSON-lines file, Prometheus counters, the cluster aggregator).
// Everything is capped; what the caps turn away is counted and
// reported in the batch as dropped, never silently lost.
//
// That goroutine reads the conntrack socket itself (loop.go): a batch
// of events is read and handled on one wake-up, and an idle collector
// waits in poll(2), on the socket and an eventfd the nflog reader
// writes, until an event, a mark or its next due time (not in Go's
// network poller, which would wake for every event). The nflog reader
// runs on a goroutine of its own and queues marks to it; when it fails
// it is logged, counted and started again with backoff, and the flows
// decided meanwhile say so (Flow.NoTrace). A socket that cannot be
// opened at the start is handled the same way (the nflog reader with
// backoff, the conntrack socket subscribed again every second), so a
// moment's trouble then does not turn flow records off until felix
// restarts. Events the kernel could not queue for the conntrack socket
// are counted from its drop counter (ct-overrun).
package flowrec
