package plugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/routed-net/routed/felix/policy/nftdp"
)

// errPolicyNotProgrammed: felix did not program the pod's interface in
// time (CNI code 11, try again later).
var errPolicyNotProgrammed = errors.New("routed-cni: network policy not programmed")

// waitForPolicy returns once felix has programmed the pod's host
// interface in the policy tables (conf.PolicySetupTimeoutSeconds > 0),
// so that ADD returns with the pod's policy, or its profiles' allow, in
// force. Until then the interface passes nothing (the tables drop every
// cali* interface they do not know), so the wait decides only when the
// pod becomes reachable, never whether a packet slips through. felix
// programs the interface in the tables of the pod's address families
// only (ips), so only those are asked.
func waitForPolicy(ctx context.Context, c *call, ips []net.IP) error {
	limit := time.Duration(c.conf.PolicySetupTimeoutSeconds) * time.Second
	if limit <= 0 {
		return nil
	}
	var fams nftdp.Families
	for _, ip := range ips {
		if ip.To4() != nil {
			fams |= nftdp.FamilyIPv4
		} else {
			fams |= nftdp.FamilyIPv6
		}
	}
	start := time.Now()
	deadline := start.Add(limit)
	var last error
	for {
		ok, err := nftdp.Programmed(-1, "", c.hostVeth, fams)
		if ok {
			c.log.WithField("waited", time.Since(start).Round(time.Millisecond)).Debug("policy programmed")
			return nil
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			why := "is routed running on this node?"
			if last != nil {
				why = last.Error()
			}
			return fmt.Errorf("%w: felix did not program %s for %s within %s (policy_setup_timeout_seconds): %s",
				errPolicyNotProgrammed, c.hostVeth, c.describe(), limit, why)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}
