package api

import (
	"fmt"
	"net/netip"
	"strings"
)

// IPReservation is Calico's IPReservation: addresses that IPAM does not
// hand out when it chooses an address itself (a pod's or a tunnel's),
// though they lie in a pool. As in Calico, an address asked for by name
// (pkg/ipam AssignIP: a re-import, an explicit request) is not refused:
// the reservation keeps the address free for whoever asks for it.
type IPReservation struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta        `json:"metadata"`
	Spec     IPReservationSpec `json:"spec"`
}

// IPReservationSpec is Calico's v3 IPReservationSpec.
type IPReservationSpec struct {
	// ReservedCIDRs are the addresses ("10.0.0.5", "fd00::5") and CIDRs
	// ("10.0.1.0/28") reserved, IPv4 and IPv6 mixed. Host bits of a CIDR
	// are cleared and IPv6 is written in its canonical form on decode.
	ReservedCIDRs []string `json:"reservedCIDRs,omitempty"`
}

// GetKind implements Resource.
func (r *IPReservation) GetKind() Kind { return KindIPReservation }

// Meta implements Resource.
func (r *IPReservation) Meta() *ObjectMeta { return &r.Metadata }

// setDefaults normalises each entry that parses (the others are left for
// Validate to name): a CIDR without its host bits, canonical IPv6.
func (r *IPReservation) setDefaults() {
	for i, s := range r.Spec.ReservedCIDRs {
		p, bare, err := parseReserved(s)
		if err != nil {
			continue
		}
		if bare {
			r.Spec.ReservedCIDRs[i] = p.Addr().String()
		} else {
			r.Spec.ReservedCIDRs[i] = p.String()
		}
	}
}

// Validate implements Resource.
func (r *IPReservation) Validate() error {
	var v errs
	validateMeta(&v, KindIPReservation, &r.Metadata)
	if len(r.Spec.ReservedCIDRs) == 0 {
		v.add("spec.reservedCIDRs", nil, "is required: list the addresses or CIDRs to reserve")
	}
	seen := map[netip.Prefix]int{}
	for i, s := range r.Spec.ReservedCIDRs {
		field := indexed("spec.reservedCIDRs", i)
		p, _, err := parseReserved(s)
		if err != nil {
			v.add(field, s, "%v", err)
			continue
		}
		if j, dup := seen[p]; dup {
			v.add(field, s, "repeats spec.reservedCIDRs[%d]", j)
			continue
		}
		seen[p] = i
	}
	return v.result(KindIPReservation, r.Metadata.Name)
}

// ReservedPrefixes returns the reserved CIDRs as prefixes (a bare
// address as its /32 or /128), skipping any that do not parse (Validate
// reports them).
func (r *IPReservation) ReservedPrefixes() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(r.Spec.ReservedCIDRs))
	for _, s := range r.Spec.ReservedCIDRs {
		if p, _, err := parseReserved(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// parseReserved reads one reservedCIDRs entry: an address (bare) or a
// CIDR, masked.
func parseReserved(s string) (p netip.Prefix, bare bool, err error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, false, fmt.Errorf("is not an IP address or CIDR")
		}
		if err := checkReservedAddr(a); err != nil {
			return netip.Prefix{}, false, err
		}
		return netip.PrefixFrom(a, a.BitLen()), true, nil
	}
	p, err = netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, false, fmt.Errorf("is not an IP address or CIDR")
	}
	if err := checkReservedAddr(p.Addr()); err != nil {
		return netip.Prefix{}, false, err
	}
	return p.Masked(), false, nil
}

func checkReservedAddr(a netip.Addr) error {
	switch {
	case a.Zone() != "":
		return fmt.Errorf("has an IPv6 zone, which an address in a pool never has")
	case a.Is4In6():
		return fmt.Errorf("is an IPv4-mapped IPv6 address: write the IPv4 address")
	}
	return nil
}
