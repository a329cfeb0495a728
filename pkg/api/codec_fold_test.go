package api_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode"

	"sigs.k8s.io/yaml"

	"github.com/routed-net/routed/pkg/api"
)

// capitalise rewrites every field name of a generic document to start
// with a capital letter, as a user writing Go field names (Order:,
// DefaultAction:) would, leaving the keys of labels and annotations
// (data, not field names) as they are.
func capitalise(v any, parent string) any {
	switch x := v.(type) {
	case map[string]any:
		if parent == "labels" || parent == "annotations" || parent == "labelsToApply" {
			return x
		}
		out := make(map[string]any, len(x))
		for k, sub := range x {
			r := []rune(k)
			r[0] = unicode.ToUpper(r[0])
			out[string(r)] = capitalise(sub, k)
		}
		return out
	case []any:
		for i := range x {
			x[i] = capitalise(x[i], parent)
		}
	}
	return v
}

func encodeAll(t *testing.T, rs []api.Resource) string {
	t.Helper()
	var b bytes.Buffer
	if err := api.Encode(&b, rs, "yaml", true); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestFieldNamesAnyCaseCalicoFiles reads every Calico file of testdata
// with each field name capitalised (calicoctl's decoding matches field
// names regardless of case): each must read exactly as the original
// does, with the same warnings, or fail as the original fails.
func TestFieldNamesAnyCaseCalicoFiles(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/calico/*.yaml")
	if err != nil || len(files) < 20 {
		t.Fatalf("testdata: %v (%d files)", err, len(files))
	}
	files = append(files, "testdata/policy-model.yaml")
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var upper []string
			for _, doc := range strings.Split(string(data), "\n---") {
				var obj map[string]any
				if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
					t.Fatal(err)
				}
				if obj == nil {
					continue
				}
				b, err := yaml.Marshal(capitalise(obj, ""))
				if err != nil {
					t.Fatal(err)
				}
				upper = append(upper, string(b))
			}
			in := strings.Join(upper, "---\n")
			if !strings.Contains(in, "Spec:") || !strings.Contains(in, "Kind:") {
				t.Fatalf("capitalised input has no Spec: or Kind:\n%s", in)
			}
			want, wantErr := api.Decode(data)
			got, gotErr := api.Decode([]byte(in))
			if wantErr != nil {
				if gotErr == nil {
					t.Fatalf("original fails (%v), capitalised applies", wantErr)
				}
				if errors.Is(wantErr, api.ErrDecode) != errors.Is(gotErr, api.ErrDecode) {
					t.Fatalf("original fails with %v, capitalised with %v", wantErr, gotErr)
				}
				return
			}
			if gotErr != nil {
				t.Fatalf("capitalised: %v\n%s", gotErr, in)
			}
			if a, b := encodeAll(t, want.Resources), encodeAll(t, got.Resources); a != b {
				t.Errorf("capitalised reads differently:\n%s\nwant:\n%s", b, a)
			}
			if len(want.Warnings) != len(got.Warnings) {
				t.Errorf("warnings %q, want %q", got.Warnings, want.Warnings)
			}
			for _, r := range got.Resources {
				if err := r.Validate(); err != nil {
					t.Errorf("capitalised does not validate: %v", err)
				}
			}
		})
	}
}

func TestFieldNamesAnyCase(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		in    string
		check func(t *testing.T, d *api.Decoded)
		// err, when set, is what the error must say (each).
		err []string
	}{
		{name: "tier Order as calicoctl accepts it",
			in: "apiVersion: projectcalico.org/v3\nKind: Tier\nMetadata: {Name: t1}\nSpec: {Order: 100, DefaultAction: Pass}\n",
			check: func(t *testing.T, d *api.Decoded) {
				tr := d.Resources[0].(*api.Tier)
				if tr.Metadata.Name != "t1" || tr.Spec.Order == nil || *tr.Spec.Order != 100 || tr.Spec.DefaultAction == nil || *tr.Spec.DefaultAction != "Pass" {
					t.Errorf("tier %+v", tr)
				}
			}},
		{name: "all upper case", in: "APIVERSION: routed.io/v1\nKIND: IPPool\nMETADATA: {NAME: p}\nSPEC: {CIDR: 10.1.0.0/16, BLOCKSIZE: 28}\n",
			check: func(t *testing.T, d *api.Decoded) {
				if p := d.Resources[0].(*api.IPPool); p.Spec.BlockSize != 28 || p.Spec.CIDR != "10.1.0.0/16" {
					t.Errorf("pool %+v", p.Spec)
				}
			}},
		{name: "labels, annotations and rule annotations keep their case",
			in: `apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata:
  Name: x
  Labels: {App: web, app: db}
  Annotations: {Owner: team}
Spec:
  Selector: App == 'web'
  Ingress:
  - Action: Allow
    Metadata: {Annotations: {From: Frontend}}
    Source: {Selector: app == 'db', NamespaceSelector: all()}
    Destination: {Ports: [80]}
`,
			check: func(t *testing.T, d *api.Decoded) {
				np := d.Resources[0].(*api.NetworkPolicy)
				if np.Metadata.Labels["App"] != "web" || np.Metadata.Labels["app"] != "db" || np.Metadata.Annotations["Owner"] != "team" {
					t.Errorf("metadata %+v", np.Metadata)
				}
				in := np.Spec.Ingress
				if len(in) != 1 || in[0].Action != "Allow" || in[0].Metadata == nil || in[0].Metadata.Annotations["From"] != "Frontend" ||
					in[0].Source.Selector != "app == 'db'" || len(in[0].Destination.Ports) != 1 {
					t.Errorf("ingress %+v", in)
				}
			}},
		{name: "JSON as calicoctl reads it", in: `{"apiVersion": "projectcalico.org/v3", "Kind": "Tier", "Metadata": {"Name": "t2"}, "Spec": {"ORDER": 7}}`,
			check: func(t *testing.T, d *api.Decoded) {
				if tr := d.Resources[0].(*api.Tier); tr.Metadata.Name != "t2" || tr.Spec.Order == nil || *tr.Spec.Order != 7 {
					t.Errorf("tier %+v", tr)
				}
			}},
		{name: "list items and their fields", in: "APIVersion: routed.io/v1\nKind: IPPoolList\nItems:\n- Metadata: {Name: a}\n  Spec: {Cidr: 10.1.0.0/16}\n",
			check: func(t *testing.T, d *api.Decoded) {
				if len(d.Resources) != 1 || d.Resources[0].(*api.IPPool).Spec.CIDR != "10.1.0.0/16" {
					t.Errorf("got %+v", d.Resources)
				}
			}},
		{name: "calico-only field in another case is still warned", in: "apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: a}\nspec: {cidr: 10.1.0.0/16, AllowedUses: [Workload, Tunnel]}\n",
			check: func(t *testing.T, d *api.Decoded) {
				if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], "spec.allowedUses") {
					t.Errorf("warnings %q", d.Warnings)
				}
			}},
		{name: "calico-only field in another case is still refused",
			in:  "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: a}\nspec:\n  ingress:\n  - action: Allow\n    HTTP: {methods: [GET]}\n",
			err: []string{"document 1 (GlobalNetworkPolicy a)", "spec.ingress[0].http", "cannot be ignored"}},
		{name: "same field twice in two cases", in: "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: t}\nspec: {order: 1, Order: 2}\n",
			err: []string{"document 1 (Tier t)", `spec.order: "Order" and "order" name the same field`}},
		{name: "same field twice in a rule", in: "apiVersion: projectcalico.org/v3\nkind: NetworkPolicy\nmetadata: {name: x}\nspec:\n  ingress:\n  - action: Allow\n    ACTION: Deny\n",
			err: []string{"(NetworkPolicy default/x)", `spec.ingress[0].action: "ACTION" and "action"`}},
		{name: "same header field twice", in: "apiVersion: routed.io/v1\nkind: IPPool\nKind: IPPool\nmetadata: {name: a}\n",
			err: []string{"document 1", `"Kind" and "kind"`}},
		{name: "a key that is no field in any case is unknown", in: "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: a}\nspec: {cidr: 10.1.0.0/16, BlockSise: 26}\n",
			err: []string{"document 1 (IPPool a)", "unknown field(s) spec.BlockSise"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, err := api.Decode([]byte(tc.in))
			if tc.err != nil {
				if err == nil {
					t.Fatal("decoded; want an error")
				}
				if !errors.Is(err, api.ErrDecode) {
					t.Errorf("%v: not ErrDecode", err)
				}
				for _, w := range tc.err {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, d)
		})
	}
}

// TestErrorsNameFileAndDocument checks the shape of errors as routedctl
// shows them: file, document, object, field; for decoding errors and
// for validation after decoding, and no Go syntax in values.
func TestErrorsNameFileAndDocument(t *testing.T) {
	t.Parallel()
	two := "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: t}\nspec: {order: 1}\n---\n" +
		"apiVersion: projectcalico.org/v3\nkind: NetworkPolicy\nmetadata: {name: x}\nspec:\n  ingress:\n  - action: Alow\n"
	d, err := api.Decode([]byte(two))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Docs) != 2 || d.Docs[1] != "document 2" {
		t.Fatalf("docs %q", d.Docs)
	}
	verr := d.Resources[1].Validate()
	got := api.Locate(verr, "b.yaml", d.Docs[1], d.Resources[1]).Error()
	if want := "b.yaml: document 2 (NetworkPolicy default/x): spec.ingress[0].action: "; !strings.HasPrefix(got, want) {
		t.Errorf("validation error %q, want it to start with %q", got, want)
	}
	if !errors.Is(api.Locate(verr, "b.yaml", d.Docs[1], d.Resources[1]), api.ErrInvalid) {
		t.Error("a located validation error is not ErrInvalid")
	}

	_, err = api.Decode([]byte("apiVersion: routed.io/v1\nkind: IPPoolList\nitems:\n- metadata: {name: a}\n  spec: {cidr: 10.1.0.0/16}\n- metadata: {name: b}\n  spec: {cidr: [10.2.0.0/16]}\n"))
	if err == nil {
		t.Fatal("a list as cidr decoded")
	}
	got = api.Locate(err, "pools.yaml", "", nil).Error()
	if !strings.HasPrefix(got, "pools.yaml: document 1 item 2 (IPPool b): ") || !strings.Contains(got, "spec.cidr") {
		t.Errorf("decode error %q", got)
	}

	for _, v := range []any{map[string]any{"a": 1}, []any{"x", 2}, struct{ A int }{1}, map[string]string{"k": "v"}} {
		s := api.FieldError{Field: "spec.x", Value: v, Detail: "is wrong"}.String()
		if strings.Contains(s, "map[") || strings.Contains(s, "{1}") || strings.Contains(s, "[x 2]") {
			t.Errorf("Go syntax reaches the user: %s", s)
		}
	}
	for in, want := range map[string]string{
		"metadata: {name: a, labels: [x, y]}\nspec: {cidr: 10.1.0.0/16}":  "field metadata.labels: expected an object of names to strings, got a list",
		"metadata: {name: a}\nspec: {cidr: 10.1.0.0/16, blockSize: [26]}": "field spec.blockSize: expected a whole number, got a list",
		"metadata: {name: a}\nspec: {cidr: {a: b}}":                       "field spec.cidr: expected a string, got an object",
	} {
		_, err := api.Decode([]byte("apiVersion: routed.io/v1\nkind: IPPool\n" + in + "\n"))
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "map[") || strings.Contains(err.Error(), "[]") {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
	_, err = api.Decode([]byte("apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: a}\nspec: {cidr: 10.1.0.0/16, assignmentMode: {manual: true}}\n"))
	if err == nil || strings.Contains(err.Error(), "map[") || !strings.Contains(err.Error(), `{"manual":true}`) {
		t.Errorf("refused Calico value shown as %v", err)
	}
}

// TestNoFieldNamesFoldTogether: no resource type has two JSON field
// names that differ only in case at one level, so folding a key to its
// field is never ambiguous.
func TestNoFieldNamesFoldTogether(t *testing.T) {
	t.Parallel()
	seen := map[reflect.Type]bool{}
	var walk func(typ reflect.Type, path string)
	walk = func(typ reflect.Type, path string) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Array || typ.Kind() == reflect.Map {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] {
			return
		}
		seen[typ] = true
		lower := map[string]string{}
		var fields func(typ reflect.Type)
		fields = func(typ reflect.Type) {
			for i := 0; i < typ.NumField(); i++ {
				f := typ.Field(i)
				name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
				if f.Anonymous && (name == "" || strings.Contains(opts, "inline")) {
					fields(f.Type)
					continue
				}
				if name == "-" || !f.IsExported() {
					continue
				}
				if name == "" {
					name = f.Name
				}
				if other, dup := lower[strings.ToLower(name)]; dup && other != name {
					t.Errorf("%s: fields %q and %q differ only in case", path, other, name)
				}
				lower[strings.ToLower(name)] = name
				walk(f.Type, path+"."+name)
			}
		}
		fields(typ)
	}
	for _, k := range api.Kinds {
		r, err := api.New(k)
		if err != nil {
			t.Fatal(err)
		}
		walk(reflect.TypeOf(r), string(k))
	}
}
