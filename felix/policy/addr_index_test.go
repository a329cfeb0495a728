package policy

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"testing"
)

// TestAddrIndexAnswersAsTheWalk: a model (indexed) and a calculator
// (walking every endpoint and network set) fed the same random
// endpoints and network sets, replaced and deleted along the way, name
// the same endpoint and network set for every address probed: single
// addresses, wider prefixes, shared addresses (lowest key wins), host
// endpoints included or not.
func TestAddrIndexAnswersAsTheWalk(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	indexed, walk := NewModel(), NewCalc(discard{}, LogConfig{})
	addr := func() netip.Addr { return netip.AddrFrom4([4]byte{10, 1, byte(r.IntN(4)), byte(r.IntN(64))}) }
	prefix := func() netip.Prefix {
		a := addr()
		switch r.IntN(10) {
		case 0:
			return netip.PrefixFrom(a, 26)
		case 1:
			return netip.PrefixFrom(netip.AddrFrom16(a.As16()).Unmap(), 30)
		default:
			return netip.PrefixFrom(a, 32)
		}
	}
	for step := range 3000 {
		switch k := r.IntN(10); {
		case k < 5:
			key := "ns/wep-" + strconv.Itoa(r.IntN(200))
			if r.IntN(8) == 0 {
				key = HostEndpointKey("node-" + strconv.Itoa(r.IntN(3)) + "-eth" + strconv.Itoa(r.IntN(3)))
			}
			ep := Endpoint{Key: key, Namespace: "ns", IPs: []netip.Prefix{prefix()}}
			if r.IntN(4) == 0 {
				ep.IPs = append(ep.IPs, prefix())
			}
			indexed.SetEndpoint(ep)
			walk.SetEndpoint(ep)
		case k < 7:
			key := "ns/wep-" + strconv.Itoa(r.IntN(200))
			indexed.DeleteEndpoint(key)
			walk.DeleteEndpoint(key)
		case k < 9:
			s := NetworkSet{Key: "gns:set-" + strconv.Itoa(r.IntN(40))}
			for range 1 + r.IntN(4) {
				s.Nets = append(s.Nets, prefix())
			}
			indexed.SetNetworkSet(s)
			walk.SetNetworkSet(s)
		default:
			key := "gns:set-" + strconv.Itoa(r.IntN(40))
			indexed.DeleteNetworkSet(key)
			walk.DeleteNetworkSet(key)
		}
		for range 20 {
			a := addr()
			for _, hosts := range []bool{true, false} {
				got, want := indexed.findAt(a, hosts), walk.findAt(a, hosts)
				if got != nil && want != nil && got.key == want.key || got == nil && want == nil {
					continue
				}
				t.Fatalf("step %d: endpoint at %s (hosts %v): indexed %s, walk %s", step, a, hosts, keyOf(got), keyOf(want))
			}
			gs, gok := indexed.NetworkSetAt(a)
			ws, wok := walk.NetworkSetAt(a)
			if gok != wok || gs.Key != ws.Key || fmt.Sprint(gs.Nets) != fmt.Sprint(ws.Nets) {
				t.Fatalf("step %d: network set at %s: indexed %v %v, walk %v %v", step, a, gok, gs, wok, ws)
			}
		}
	}
}

func keyOf(e *endpoint) string {
	if e == nil {
		return "none"
	}
	return e.key
}

// BenchmarkEndpointAt: naming one address among 150,000 endpoints, as
// the flow collector does for each new connection's two ends, by the
// model's index and by a walk.
func BenchmarkEndpointAt(b *testing.B) {
	indexed, walk := NewModel(), NewCalc(discard{}, LogConfig{})
	const n = 150000
	for i := range n {
		ep := Endpoint{Key: "ns-" + strconv.Itoa(i%2000) + "/wep-" + strconv.Itoa(i), Namespace: "ns-" + strconv.Itoa(i%2000),
			IPs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32)}}
		indexed.SetEndpoint(ep)
		walk.SetEndpoint(ep)
	}
	probe := netip.AddrFrom4([4]byte{10, 1, 2, 3})
	for _, c := range []struct {
		name string
		calc *Calc
	}{{"index", indexed}, {"walk", walk}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				if c.calc.EndpointAt(probe) == "" {
					b.Fatal("no endpoint at", probe)
				}
			}
		})
	}
}
