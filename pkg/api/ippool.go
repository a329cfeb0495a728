package api

import (
	"fmt"
	"net/netip"
)

// Encapsulation modes for IPIP and VXLAN (a pool uses at most one).
const (
	EncapNever       = "Never"
	EncapAlways      = "Always"
	EncapCrossSubnet = "CrossSubnet"
)

// DefaultBlockSize is the prefix length of IPAM blocks when an IPv4 pool
// sets none; DefaultBlockSize6 when an IPv6 pool does (Calico's defaults:
// 64 addresses either way).
const (
	DefaultBlockSize  = 26
	DefaultBlockSize6 = 122
)

// IPPool is a range of pod addresses, carved into blocks that nodes claim.
type IPPool struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta `json:"metadata"`
	Spec     IPPoolSpec `json:"spec"`
}

// IPPoolSpec is the desired state of an IPPool.
type IPPoolSpec struct {
	CIDR         string `json:"cidr"`
	BlockSize    int    `json:"blockSize,omitempty"`
	IPIPMode     string `json:"ipipMode,omitempty"`
	VXLANMode    string `json:"vxlanMode,omitempty"`
	NATOutgoing  bool   `json:"natOutgoing,omitempty"`
	Disabled     bool   `json:"disabled,omitempty"`
	NodeSelector string `json:"nodeSelector,omitempty"`
	// DisableBGPExport keeps the pool's blocks, and every route inside the
	// pool, from all BGP peers, mesh peers included, as Calico's field
	// does. Other routed nodes still reach a VXLAN pool's pods (felix
	// programs those routes from the datastore); a pool routed natively or
	// over IPIP is then reachable only from its own node.
	DisableBGPExport bool `json:"disableBGPExport,omitempty"`
}

// GetKind implements Resource.
func (p *IPPool) GetKind() Kind { return KindIPPool }

// Meta implements Resource.
func (p *IPPool) Meta() *ObjectMeta { return &p.Metadata }

func (p *IPPool) setDefaults() {
	if p.Spec.BlockSize == 0 {
		p.Spec.BlockSize = DefaultBlockSize
		if pfx, err := netip.ParsePrefix(p.Spec.CIDR); err == nil && pfx.Addr().Is6() {
			p.Spec.BlockSize = DefaultBlockSize6
		}
	}
	if p.Spec.IPIPMode == "" {
		p.Spec.IPIPMode = EncapNever
	}
	if p.Spec.VXLANMode == "" {
		p.Spec.VXLANMode = EncapNever
	}
	if p.Spec.NodeSelector == "" {
		p.Spec.NodeSelector = "all()"
	}
	if pfx, err := netip.ParsePrefix(p.Spec.CIDR); err == nil {
		p.Spec.CIDR = pfx.Masked().String()
	}
}

// IsIPv6 reports whether the pool holds IPv6 addresses.
func (p *IPPool) IsIPv6() bool { return p.Prefix().Addr().Is6() }

// Prefix returns the pool's CIDR; call only on a validated pool.
func (p *IPPool) Prefix() netip.Prefix {
	pfx, _ := netip.ParsePrefix(p.Spec.CIDR)
	return pfx.Masked()
}

// Validate implements Resource.
func (p *IPPool) Validate() error {
	var v errs
	validateName(&v, p.Metadata.Name)
	pfx, err := netip.ParsePrefix(p.Spec.CIDR)
	switch {
	case p.Spec.CIDR == "":
		v.add("spec.cidr", nil, "is required")
	case err != nil:
		v.add("spec.cidr", p.Spec.CIDR, "is not a CIDR (want e.g. 10.244.0.0/16)")
	case pfx.Addr().Zone() != "" || pfx.Addr().Is4In6():
		v.add("spec.cidr", p.Spec.CIDR, "must be a plain IPv4 or IPv6 CIDR (no zone, no IPv4-mapped form)")
	case pfx.Addr().Is4() && (pfx.Bits() > 32 || pfx.Bits() < 8):
		v.add("spec.cidr", p.Spec.CIDR, "prefix length must be between /8 and /32")
	case pfx.Addr().Is6() && pfx.Bits() < 16:
		v.add("spec.cidr", p.Spec.CIDR, "IPv6 prefix length must be between /16 and /128")
	default:
		for _, r := range reservedRanges {
			if pfx.Overlaps(r.prefix) {
				v.add("spec.cidr", p.Spec.CIDR, "overlaps %s (%s): pods there would be unreachable or hijack host traffic", r.prefix, r.what)
			}
		}
	}
	bs := p.Spec.BlockSize
	v6 := err == nil && pfx.Addr().Is6()
	switch {
	case !v6 && (bs < 20 || bs > 32):
		v.add("spec.blockSize", bs, "must be between 20 and 32")
	case v6 && (bs < 116 || bs > 128):
		v.add("spec.blockSize", bs, "must be between 116 and 128 for an IPv6 pool (default 122)")
	case err == nil && bs < pfx.Bits():
		v.add("spec.blockSize", bs, "blocks must fit in the pool: block size /%d is larger than the pool %s", bs, p.Spec.CIDR)
	}
	if v6 && p.Spec.IPIPMode != EncapNever && validMode(p.Spec.IPIPMode) {
		v.add("spec.ipipMode", p.Spec.IPIPMode, "IPIP carries IPv4 only: an IPv6 pool must use ipipMode Never")
	}
	if !validMode(p.Spec.IPIPMode) {
		v.add("spec.ipipMode", p.Spec.IPIPMode, "must be one of Never, Always, CrossSubnet")
	}
	if !validMode(p.Spec.VXLANMode) {
		v.add("spec.vxlanMode", p.Spec.VXLANMode, "must be one of Never, Always, CrossSubnet")
	}
	if p.Spec.IPIPMode != EncapNever && p.Spec.VXLANMode != EncapNever && validMode(p.Spec.IPIPMode) && validMode(p.Spec.VXLANMode) {
		v.add("spec.vxlanMode", p.Spec.VXLANMode, "a pool uses one encapsulation: set ipipMode or vxlanMode to Never (ipipMode is %s)", p.Spec.IPIPMode)
	}
	validateSelector(&v, "spec.nodeSelector", p.Spec.NodeSelector)
	return v.result(KindIPPool, p.Metadata.Name)
}

// reservedRanges are ranges a pool must not touch.
var reservedRanges = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "\"this network\""},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local, holds the pods' gateway 169.254.1.1"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved, includes broadcast"},
	{netip.MustParsePrefix("::/127"), "the unspecified and loopback addresses"},
	{netip.MustParsePrefix("::ffff:0:0/96"), "IPv4-mapped addresses"},
	{netip.MustParsePrefix("fe80::/10"), "link-local, holds the pods' IPv6 gateway"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

func validMode(m string) bool {
	return m == EncapNever || m == EncapAlways || m == EncapCrossSubnet
}

// PoolOverlapError reports a pool whose CIDR overlaps an existing pool.
func poolOverlap(p, other *IPPool) error {
	return &ValidationError{Kind: KindIPPool, Name: p.Metadata.Name, Fields: []FieldError{{
		Field:  "spec.cidr",
		Value:  p.Spec.CIDR,
		Detail: fmt.Sprintf("overlaps IPPool %q (%s)", other.Metadata.Name, other.Spec.CIDR),
	}}}
}

// poolImmutable refuses a change of cidr or blockSize: the pool's blocks
// were carved with them, and IPAM with new ones claims blocks overlapping
// existing ones (two pods on two nodes with one address).
func poolImmutable(p, old *IPPool) error {
	var fields []FieldError
	how := fmt.Sprintf("it cannot change once the pool exists (its blocks were carved with the old value). "+
		"To migrate: create a new pool with the new value, set disabled: true on %q so new pods use the new pool, "+
		"recreate the pods still in %q, then delete it", old.Metadata.Name, old.Metadata.Name)
	if p.Prefix() != old.Prefix() {
		fields = append(fields, FieldError{Field: "spec.cidr", Value: p.Spec.CIDR, Detail: fmt.Sprintf("was %s: %s", old.Spec.CIDR, how)})
	}
	if p.Spec.BlockSize != old.Spec.BlockSize {
		fields = append(fields, FieldError{Field: "spec.blockSize", Value: p.Spec.BlockSize, Detail: fmt.Sprintf("was %d: %s", old.Spec.BlockSize, how)})
	}
	if len(fields) == 0 {
		return nil
	}
	return &ValidationError{Kind: KindIPPool, Name: p.Metadata.Name, Fields: fields}
}

// ValidatePoolAgainst reports an error if p overlaps any pool in existing
// other than one with p's own name (which p replaces), or changes that
// pool's cidr or blockSize. Both must be valid.
func ValidatePoolAgainst(p *IPPool, existing []*IPPool) error {
	for _, o := range existing {
		if o.Metadata.Name == p.Metadata.Name {
			continue
		}
		if p.Prefix().Overlaps(o.Prefix()) {
			return poolOverlap(p, o)
		}
	}
	for _, o := range existing {
		if o.Metadata.Name == p.Metadata.Name {
			return poolImmutable(p, o)
		}
	}
	return nil
}
