package api_test

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// calicoFelixFields reads the field names of Calico's
// FelixConfigurationSpec (testdata/calico/felixconfig-fields.txt).
func calicoFelixFields(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("testdata/calico/felixconfig-fields.txt")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	if len(out) < 150 {
		t.Fatalf("only %d Calico fields listed", len(out))
	}
	return out
}

func specJSONFields(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		out[name] = true
	}
	return out
}

// TestFelixConfigurationTable: every field of Calico's
// FelixConfigurationSpec is honoured (a field of routed's), refused or
// warned, exactly once, and the table names no field Calico lacks.
func TestFelixConfigurationTable(t *testing.T) {
	t.Parallel()
	calico := calicoFelixFields(t)
	own := specJSONFields(reflect.TypeOf(api.FelixConfigurationSpec{}))
	rows := map[string]api.FelixConfigurationField{}
	for _, r := range api.FelixConfigurationFields() {
		if _, dup := rows[r.Name]; dup {
			t.Errorf("%s is in the table twice", r.Name)
		}
		rows[r.Name] = r
		if r.Why == "" {
			t.Errorf("%s: no reason", r.Name)
		}
		if (r.Verdict == "honoured") != own[r.Name] {
			t.Errorf("%s: verdict %q, but routed's spec has the field: %v", r.Name, r.Verdict, own[r.Name])
		}
	}
	known := map[string]bool{}
	for _, f := range calico {
		known[f] = true
		if _, ok := rows[f]; !ok {
			t.Errorf("Calico field %s is neither honoured, refused nor warned", f)
		}
	}
	for name := range rows {
		if !known[name] {
			t.Errorf("table names %s, which is not a Calico field", name)
		}
	}
	for name := range own {
		if !known[name] {
			t.Errorf("routed's spec has %s, which is not a Calico field", name)
		}
	}
}

// routedValue reads the value a "refused unless X" row accepts.
func routedValue(v string) (any, bool) {
	switch v {
	case "unset":
		return nil, false
	case "true":
		return true, true
	case "false":
		return false, true
	}
	if n, err := strconv.Atoi(v); err == nil {
		return n, true
	}
	return v, true
}

func felixDoc(name string, fields map[string]any) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: %s}\nspec:\n", name)
	if len(fields) == 0 {
		b.WriteString("  {}\n")
	}
	for k, v := range fields {
		if s, ok := v.(string); ok {
			v = strconv.Quote(s)
		}
		fmt.Fprintf(&b, "  %s: %v\n", k, v)
	}
	return b.String()
}

// TestFelixConfigurationVerdicts applies each Calico field: a warned one
// is dropped with a warning naming it and its reason; a refused one
// applies at routed's value and is refused, naming it and why, at
// another.
func TestFelixConfigurationVerdicts(t *testing.T) {
	t.Parallel()
	for _, r := range api.FelixConfigurationFields() {
		switch {
		case r.Verdict == "warned":
			d, err := api.Decode([]byte(felixDoc("default", map[string]any{r.Name: "x"})))
			if err != nil {
				t.Errorf("%s: %v", r.Name, err)
				continue
			}
			if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], "spec."+r.Name) || !strings.Contains(d.Warnings[0], r.Why) {
				t.Errorf("%s: warnings %q", r.Name, d.Warnings)
			}
		case strings.HasPrefix(r.Verdict, "warned unless "):
			ok := strings.TrimPrefix(r.Verdict, "warned unless ")
			if d, err := api.Decode([]byte(felixDoc("default", map[string]any{r.Name: ok}))); err != nil || len(d.Warnings) != 0 {
				t.Errorf("%s: %s: %v %v", r.Name, ok, d, err)
			}
			if d, err := api.Decode([]byte(felixDoc("default", map[string]any{r.Name: "Other"}))); err != nil || len(d.Warnings) != 1 {
				t.Errorf("%s: Other: %v %v", r.Name, d, err)
			}
		case strings.HasPrefix(r.Verdict, "refused unless "):
			// "refused unless A or B": each is routed's value
			var oks []any
			for _, v := range strings.Split(strings.TrimPrefix(r.Verdict, "refused unless "), " or ") {
				ok, set := routedValue(v)
				oks = append(oks, ok)
				if !set {
					continue
				}
				d, err := api.Decode([]byte(felixDoc("default", map[string]any{r.Name: ok})))
				if err != nil || len(d.Warnings) != 0 {
					t.Errorf("%s at routed's value %v: %v", r.Name, ok, err)
				} else if err := d.Resources[0].Validate(); err != nil {
					t.Errorf("%s at routed's value %v: %v", r.Name, ok, err)
				}
			}
			refused := false
			for _, bad := range []any{true, false, 1, "Other"} {
				if slices.Contains(oks, bad) {
					continue
				}
				_, err := api.Decode([]byte(felixDoc("default", map[string]any{r.Name: bad})))
				if err == nil {
					continue
				}
				refused = true
				if !errors.Is(err, api.ErrDecode) || !strings.Contains(err.Error(), "spec."+r.Name) || !strings.Contains(err.Error(), r.Why) {
					t.Errorf("%s = %v: %v", r.Name, bad, err)
				}
			}
			if !refused {
				t.Errorf("%s: no value refused", r.Name)
			}
		case r.Verdict != "honoured":
			t.Errorf("%s: verdict %q", r.Name, r.Verdict)
		}
	}
}

// TestFelixConfigurationFiles reads Calico files: the reference sample
// and a node's overrides apply (honoured fields read, the others
// warned); bpfEnabled, wireguardEnabled and a Drop endpoint-to-host
// action are refused, saying why.
func TestFelixConfigurationFiles(t *testing.T) {
	t.Parallel()
	read := func(file string) (*api.Decoded, error) {
		b, err := os.ReadFile("testdata/calico/" + file)
		if err != nil {
			t.Fatal(err)
		}
		return api.Decode(b)
	}
	d, err := read("felixconfig-reference.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fc := d.Resources[0].(*api.FelixConfiguration)
	if fc.Spec.IPIPMTU == nil || *fc.Spec.IPIPMTU != 1400 || fc.Validate() != nil {
		t.Errorf("reference sample: %+v %v", fc.Spec, fc.Validate())
	}
	if len(d.Warnings) != 2 || !strings.Contains(strings.Join(d.Warnings, "\n"), "spec.ipv6Support") || !strings.Contains(strings.Join(d.Warnings, "\n"), "spec.chainInsertMode") {
		t.Errorf("warnings %q", d.Warnings)
	}

	d, err = read("felixconfig-node.yaml")
	if err != nil {
		t.Fatal(err)
	}
	node := d.Resources[0].(*api.FelixConfiguration)
	if err := node.Validate(); err != nil || len(d.Warnings) != 0 {
		t.Fatalf("node file: %v %q", err, d.Warnings)
	}
	s := node.Spec
	if *s.VXLANMTU != 1410 || *s.VXLANMTUV6 != 1390 || s.LogSeverityScreen != "Debug" || s.RouteRefreshInterval != "30s" ||
		len(*s.FailsafeInboundHostPorts) != 2 || (*s.FailsafeInboundHostPorts)[1] != (api.ProtoPort{Protocol: "UDP", Port: 68}) ||
		len(*s.FailsafeOutboundHostPorts) != 1 {
		t.Errorf("node spec %+v", s)
	}
	eff := api.EffectiveFelixConfiguration(fc, node)
	if *eff.IPIPMTU != 1400 || *eff.VXLANMTU != 1410 || eff.LogSeverityScreen != "Debug" {
		t.Errorf("effective %+v", eff)
	}

	if d, err := read("felixconfig-wireguard.yaml"); err != nil || len(d.Warnings) != 0 {
		t.Errorf("felixconfig-wireguard.yaml (host encryption, honoured): %v %v", d, err)
	} else if s := d.Resources[0].(*api.FelixConfiguration).Spec; s.WireguardHostEncryptionEnabled == nil || !*s.WireguardHostEncryptionEnabled {
		t.Errorf("felixconfig-wireguard.yaml: spec %+v", s)
	}
	// Return is what routed does (TestEndpointToHostIsReturn): the
	// rest of the configuration is kept.
	if d, err := read("felixconfig-endpoint-to-host-return.yaml"); err != nil || len(d.Resources) != 1 {
		t.Errorf("felixconfig-endpoint-to-host-return.yaml: %v %v", d, err)
	} else if s := d.Resources[0].(*api.FelixConfiguration).Spec; s.IPIPMTU == nil || *s.IPIPMTU != 1400 {
		t.Errorf("felixconfig-endpoint-to-host-return.yaml: the rest of the spec lost: %+v", s)
	}
	for file, want := range map[string]string{
		"felixconfig-bpf.yaml":                   "spec.bpfEnabled (true) cannot be ignored: routed has no eBPF dataplane",
		"felixconfig-endpoint-to-host-drop.yaml": "spec.defaultEndpointToHostAction (Drop) cannot be ignored",
	} {
		if _, err := read(file); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "document 1 (FelixConfiguration default)") {
			t.Errorf("%s: %v, want %q", file, err, want)
		}
	}
}

func TestFelixConfigurationValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, spec, want string }{
		{"global", "ipipMTU: 1440", ""},
		{"node.n1", "logSeverityScreen: warning", ""},
		{"custom", "ipipMTU: 1440", `metadata.name: must be "default"`},
		{"node.", "{}", `metadata.name: must be "default"`},
		{"default", "ipipMTU: 60", "spec.ipipMTU: must be 0 (derived from the host MTU) or between 68 and 65535"},
		{"default", "vxlanMTUV6: 1200", "spec.vxlanMTUV6: must be 0 (derived from the host MTU) or between 1280"},
		{"default", "routeRefreshInterval: 10ms", "spec.routeRefreshInterval: must be at least 1s"},
		{"default", "routeRefreshInterval: soon", "spec.routeRefreshInterval: is not a duration"},
		{"default", "vxlanPort: 0", "spec.vxlanPort: must be a UDP port"},
		{"default", "externalNodesList: [10.9.0.0/16, 192.0.2.7, 'fd00:9::/64']", ""},
		{"default", "externalNodesList: [10.9.0.0/16, 10.9.0.0/33]", "spec.externalNodesList[1]: must be a CIDR"},
		{"default", "externalNodesList: [node-b]", "spec.externalNodesList[0]: must be a CIDR"},
		{"default", "vxlanVNI: 16777216", "spec.vxlanVNI: must be a VXLAN network identifier"},
		{"default", "logSeverityScreen: Loud", "spec.logSeverityScreen: must be one of Debug, Info, Warning, Error, Fatal"},
		{"default", "failsafeInboundHostPorts: [{protocol: ICMP, port: 1}]", "spec.failsafeInboundHostPorts[0].protocol: must be TCP, UDP or SCTP"},
		{"default", "failsafeInboundHostPorts: [{port: 0}]", "spec.failsafeInboundHostPorts[0].port: is required"},
		{"default", "failsafeOutboundHostPorts: [{port: 22, net: 10.0.0.0/8}]", "spec.failsafeOutboundHostPorts[0].net: routed opens failsafe ports to every peer"},
	} {
		name := tc.name
		if name == "global" {
			name = "default"
		}
		d, err := api.Decode([]byte("apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: '" + name + "'}\nspec: {" + strings.Trim(tc.spec, "{}") + "}\n"))
		if err != nil {
			t.Errorf("%s: %v", tc.spec, err)
			continue
		}
		err = d.Resources[0].Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s %s: %v", name, tc.spec, err)
			}
			continue
		}
		if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: %v, want %q", name, tc.spec, err, tc.want)
		}
	}
}

// TestEffectiveFelixConfigurationEveryField: a node's FelixConfiguration
// overrides each field of the default's, and leaves the unset ones.
func TestEffectiveFelixConfigurationEveryField(t *testing.T) {
	t.Parallel()
	n := 1500
	ports := []api.ProtoPort{{Port: 22}}
	on := true
	full := api.FelixConfigurationSpec{IPIPMTU: &n, VXLANMTU: &n, VXLANMTUV6: &n, VXLANPort: &n, VXLANVNI: &n, RouteRefreshInterval: "10s", LogSeverityScreen: "Info",
		FailsafeInboundHostPorts: &ports, FailsafeOutboundHostPorts: &ports, WireguardEnabled: &on, WireguardEnabledV6: &on,
		WireguardHostEncryptionEnabled: &on, ExternalNodesCIDRList: &[]string{"10.9.0.0/16"}}
	v := reflect.ValueOf(full)
	for i := 0; i < v.NumField(); i++ {
		if v.Field(i).IsZero() {
			t.Fatalf("test spec leaves %s unset: add it here and to EffectiveFelixConfiguration", v.Type().Field(i).Name)
		}
	}
	node := &api.FelixConfiguration{Spec: full}
	if got := api.EffectiveFelixConfiguration(&api.FelixConfiguration{}, node); !reflect.DeepEqual(got, full) {
		t.Errorf("node's fields not all taken: %+v", got)
	}
	if got := api.EffectiveFelixConfiguration(node, &api.FelixConfiguration{}); !reflect.DeepEqual(got, full) {
		t.Errorf("default's fields not all kept: %+v", got)
	}
}

// TestFelixConfigurationDocs: docs/felixconfiguration.md has one row per
// field, as FelixConfigurationFields says.
func TestFelixConfigurationDocs(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/felixconfiguration.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, r := range api.FelixConfigurationFields() {
		if row := api.FelixConfigurationDocRow(r); !strings.Contains(doc, row) {
			t.Errorf("docs/felixconfiguration.md lacks the row\n%s", row)
		}
	}
}
