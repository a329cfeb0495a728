package datastore

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// storedSamples are records as the datastore stores them: every object
// of pkg/api's Calico and policy samples that decodes, and a
// WorkloadEndpoint as routed-cni writes one for a pod.
func storedSamples(t testing.TB) map[string]api.Kind {
	t.Helper()
	files, err := filepath.Glob("../api/testdata/calico/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../api/testdata/policy-model.yaml")
	out := map[string]api.Kind{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		d, err := api.Decode(b)
		if err != nil {
			continue // a sample of a refused input
		}
		for _, r := range d.Resources {
			b, err := prepare(r)
			if err != nil {
				continue
			}
			out[string(b)] = r.GetKind()
		}
	}
	b, err := prepare(podEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	out[string(b)] = api.KindWorkloadEndpoint
	return out
}

func podEndpoint() *api.WorkloadEndpoint {
	labels, profiles := api.PodIdentity("ns-0123", "default", map[string]string{"app": "app-17", "tier": "web"})
	return &api.WorkloadEndpoint{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindWorkloadEndpoint},
		Metadata: api.ObjectMeta{Name: "node--00123-k8s-ns--0123-app--17--7d9f8c6b5--abcde-eth0", Namespace: "ns-0123", Labels: labels, CreationTimestamp: "2026-12-01T10:00:00Z"},
		Spec: api.WorkloadEndpointSpec{Node: "node-00123", Orchestrator: "k8s", Namespace: "ns-0123", Pod: "app-17-7d9f8c6b5-abcde",
			ContainerID: strings.Repeat("0123456789abcdef", 4), Endpoint: "eth0", InterfaceName: "cali0123456789a",
			ContainerInterface: "eth0", IPNetworks: []string{"10.65.12.34/32"}, MAC: "ee:01:23:45:67:89", Handle: "k8s-pod-network." + strings.Repeat("0123456789abcdef", 4),
			ServiceAccountName: "default", Profiles: profiles, Ports: []api.WorkloadEndpointPort{
				{Name: "http", Protocol: api.ProtocolFromName("TCP"), Port: 8080}, {Name: "dns", Protocol: api.ProtocolFromName("UDP"), Port: 53}}},
	}
}

// variants are value and, for every leaf and object in it, the value
// with that part replaced by each of a few values of other types, and
// with every member name upper-cased.
func variants(t testing.TB, value string) []string {
	var doc any
	if err := json.Unmarshal([]byte(value), &doc); err != nil {
		t.Fatal(err)
	}
	out := []string{value, value[:len(value)/2], strings.ToUpper(value)}
	var walk func(set func(any), v any)
	walk = func(set func(any), v any) {
		for _, wrong := range []any{7, -1, 70000, 1.5, "x", "", true, nil, []any{"a"}, map[string]any{"a": 1}} {
			set(wrong)
			b, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, string(b))
		}
		set(v)
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				walk(func(n any) { v[k] = n }, e)
			}
		case []any:
			for i, e := range v {
				walk(func(n any) { v[i] = n }, e)
			}
		}
	}
	walk(func(n any) { doc = n }, doc)
	return out
}

// TestDecodeAsEncodingJSON: the datastore's decoder reads every stored
// sample, and each of its variants of wrong types, truncations and
// other-cased names, exactly as encoding/json does: the same resource,
// or an error where encoding/json has one.
func TestDecodeAsEncodingJSON(t *testing.T) {
	samples := storedSamples(t)
	kinds := map[api.Kind]bool{}
	checked, refused := 0, 0
	for value, k := range samples {
		kinds[k] = true
		for _, v := range variants(t, value) {
			want, err := api.New(k)
			if err != nil {
				t.Fatal(err)
			}
			wantErr := json.Unmarshal([]byte(v), want)
			got, gotErr := decode(k, []byte(v), 5)
			checked++
			if (wantErr != nil) != (gotErr != nil) {
				t.Fatalf("%s %s: encoding/json: %v; decode: %v", k, v, wantErr, gotErr)
			}
			if wantErr != nil {
				refused++
				continue
			}
			want.Meta().ResourceVersion = "5"
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s %s:\ndecode        %+v\nencoding/json %+v", k, v, got, want)
			}
		}
	}
	if len(kinds) < 8 || refused == 0 || refused == checked {
		t.Fatalf("the samples test too little: %d kinds, %d values, %d refused", len(kinds), checked, refused)
	}
	t.Logf("%d kinds, %d values, %d refused by both", len(kinds), checked, refused)
}

// BenchmarkDecodeStored: a stored pod's WorkloadEndpoint decoded by the
// datastore's decoder against encoding/json, the baseline, in one run.
func BenchmarkDecodeStored(b *testing.B) {
	value, err := prepare(podEndpoint())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decode(api.KindWorkloadEndpoint, value, 5); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var w api.WorkloadEndpoint
			if err := json.Unmarshal(value, &w); err != nil {
				b.Fatal(err)
			}
		}
	})
}
