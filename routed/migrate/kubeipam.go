package migrate

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/routed-net/routed/pkg/api"
)

// Calico's IPAM custom resources (libcalico-go's KDD backend): blocks
// named after their CIDR (10-244-1-0-26) with the etcd block's fields
// as spec; affinities "<node>-<cidr>" with spec node, cidr, state and
// deleted (a string in crd.projectcalico.org/v1); handles named after
// their lower-cased ID with spec handleID and block (CIDR -> count);
// the configuration "default" (kubeSource.ipamConfigs).
const (
	crdIPAMBlocks     = "ipamblocks"
	crdAffinities     = "blockaffinities"
	crdHandles        = "ipamhandles"
	calicoIPAMDefault = "default"
)

// readIPAM reads Calico's IPAM custom resources into st: the
// configuration, the blocks (convertBlocks, as for etcd) and a check of
// Calico's handles against the blocks.
func (s *kubeSource) readIPAM(ctx context.Context, st *calicoState) error {
	cfgs, err := s.listCRD(ctx, s.ipamConfigs)
	if err != nil {
		return err
	}
	for _, u := range cfgs {
		if u.GetName() != calicoIPAMDefault {
			st.skipped = append(st.skipped, fmt.Sprintf("IPAMConfig %s: Calico reads only %q", u.GetName(), calicoIPAMDefault))
			continue
		}
		cfg, warnings, err := kubeIPAMConfig(&u)
		if err != nil {
			return err
		}
		st.warnings = append(st.warnings, warnings...)
		st.resources = append(st.resources, cfg)
	}

	affs, err := s.listCRD(ctx, crdAffinities)
	if err != nil {
		return err
	}
	confirmed := map[string]bool{}
	for _, u := range affs {
		var spec struct {
			State   string          `json:"state"`
			Node    string          `json:"node"`
			CIDR    string          `json:"cidr"`
			Type    string          `json:"type"`
			Deleted json.RawMessage `json:"deleted"`
		}
		if err := specOf(&u, &spec); err != nil {
			st.skipped = append(st.skipped, fmt.Sprintf("BlockAffinity %s: %v", u.GetName(), err))
			continue
		}
		p, err := netip.ParsePrefix(spec.CIDR)
		if err != nil {
			st.skipped = append(st.skipped, fmt.Sprintf("BlockAffinity %s: spec.cidr %q is not a CIDR", u.GetName(), spec.CIDR))
			continue
		}
		// Affinities of other types (virtual, for load balancers) name
		// no node; written before Calico v3.14, no state means confirmed.
		if (spec.Type == "" || spec.Type == "host") && !deletedFlag(spec.Deleted) && (spec.State == "" || spec.State == "confirmed") {
			confirmed[spec.Node+" "+p.Masked().String()] = true
		}
	}

	blocks, err := s.listCRD(ctx, crdIPAMBlocks)
	if err != nil {
		return err
	}
	raw := make([]rawBlock, 0, len(blocks))
	for _, u := range blocks {
		spec, err := json.Marshal(u.Object["spec"])
		if err != nil {
			return fmt.Errorf("migrate: IPAMBlock %s: %w", u.GetName(), err)
		}
		raw = append(raw, rawBlock{where: "IPAMBlock " + u.GetName(), data: spec})
	}
	bs := convertBlocks(raw, confirmed, carriedPools(st.resources))
	st.blocks = append(st.blocks, bs.blocks...)
	st.skipped = append(st.skipped, bs.skipped...)
	s.blocks = bs

	handles, err := s.listCRD(ctx, crdHandles)
	if err != nil {
		return err
	}
	st.warnings = append(st.warnings, checkHandles(handles, bs)...)
	return nil
}

// kubeIPAMConfig converts Calico's IPAMConfig "default". Settings routed
// has no counterpart for are warned about.
func kubeIPAMConfig(u *unstructured.Unstructured) (cfg *api.IPAMConfiguration, warnings []string, err error) {
	var spec struct {
		StrictAffinity     bool   `json:"strictAffinity"`
		AutoAllocateBlocks bool   `json:"autoAllocateBlocks"`
		MaxBlocksPerHost   int    `json:"maxBlocksPerHost"`
		IPCooldownSeconds  int    `json:"ipCooldownSeconds"`
		KubeVirt           string `json:"kubeVirtVMAddressPersistence"`
	}
	if err := specOf(u, &spec); err != nil {
		return nil, nil, fmt.Errorf("migrate: Calico's IPAMConfig %s: %w", u.GetName(), err)
	}
	if spec.IPCooldownSeconds != 0 {
		warnings = append(warnings, fmt.Sprintf("Calico IPAMConfig default: spec.ipCooldownSeconds (%d) is not used by routed: a released address may be given out again at once", spec.IPCooldownSeconds))
	}
	if spec.KubeVirt != "" && spec.KubeVirt != "Disabled" {
		warnings = append(warnings, fmt.Sprintf("Calico IPAMConfig default: spec.kubeVirtVMAddressPersistence (%s) is not used by routed: routed does not keep KubeVirt VM addresses across migrations", spec.KubeVirt))
	}
	r, err := ipamConfiguration(spec.StrictAffinity, spec.AutoAllocateBlocks, spec.MaxBlocksPerHost, "IPAMConfig default")
	if err != nil {
		return nil, nil, err
	}
	return r, warnings, nil
}

// checkHandles compares Calico's handles with the blocks' allocations.
// routed writes each handle from the allocations it imports, so a
// handle that disagrees is not an error, but it is named: Calico's own
// `calicoctl ipam check` would report it too.
func checkHandles(handles []unstructured.Unstructured, bs blockSet) []string {
	// held[handle][cidr] counts the carried allocations.
	held := map[string]map[string]int{}
	for _, b := range bs.blocks {
		for _, a := range b.Allocations {
			if held[a.Handle] == nil {
				held[a.Handle] = map[string]int{}
			}
			held[a.Handle][b.CIDR.String()]++
		}
	}
	var out []string
	for _, u := range handles {
		var spec struct {
			HandleID string         `json:"handleID"`
			Block    map[string]int `json:"block"`
			Deleted  bool           `json:"deleted"`
		}
		if err := specOf(&u, &spec); err != nil {
			out = append(out, fmt.Sprintf("IPAMHandle %s: %v", u.GetName(), err))
			continue
		}
		if spec.Deleted {
			continue
		}
		got := held[spec.HandleID]
		delete(held, spec.HandleID)
		if !maps.Equal(got, spec.Block) {
			out = append(out, fmt.Sprintf("IPAMHandle %s: Calico's handle lists %v, the carried blocks hold %v for it; routed's handle is written from the blocks", spec.HandleID, spec.Block, got))
		}
	}
	for _, h := range slices.Sorted(maps.Keys(held)) {
		out = append(out, fmt.Sprintf("IPAMHandle %s: Calico has no such handle, its blocks hold %v for it; routed's handle is written from the blocks", h, held[h]))
	}
	return out
}

// specOf decodes u's spec into v.
func specOf(u *unstructured.Unstructured, v any) error {
	raw, err := json.Marshal(u.Object["spec"])
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	return nil
}

// deletedFlag reads Calico's "deleted": a string ("true") in
// crd.projectcalico.org/v1 affinities, a boolean elsewhere.
func deletedFlag(raw json.RawMessage) bool {
	var b bool
	if json.Unmarshal(raw, &b) == nil {
		return b
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		b, _ = strconv.ParseBool(s)
	}
	return b
}
