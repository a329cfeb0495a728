package api

// IPReservation is Calico's IPReservation: addresses IPAM never hands
// out, though they lie in a pool.
type IPReservation struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta        `json:"metadata"`
	Spec     IPReservationSpec `json:"spec"`
}

// IPReservationSpec is Calico's v3 IPReservationSpec.
type IPReservationSpec struct {
	// ReservedCIDRs are the addresses and CIDRs reserved.
	ReservedCIDRs []string `json:"reservedCIDRs,omitempty"`
}

// GetKind implements Resource.
func (r *IPReservation) GetKind() Kind { return KindIPReservation }

// Meta implements Resource.
func (r *IPReservation) Meta() *ObjectMeta { return &r.Metadata }

func (r *IPReservation) setDefaults() {}

// Validate implements Resource.
func (r *IPReservation) Validate() error {
	var v errs
	validateMeta(&v, KindIPReservation, &r.Metadata)
	return v.result(KindIPReservation, r.Metadata.Name)
}
