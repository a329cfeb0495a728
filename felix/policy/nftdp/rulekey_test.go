package nftdp

import (
	"crypto/sha256"
	"encoding/base64"
	"net/netip"
	"reflect"
	"testing"
)

// A rule's key hashes only the fields it sets, written by hand here: a
// field a later release adds to Rule or Side, left zero, leaves every
// existing rule's key (and so its kernel rule and counters) unchanged.
func TestRuleKeyHashesOnlySetFields(t *testing.T) {
	hash := func(s string) string {
		h := sha256.Sum256([]byte(s))
		return base64.RawURLEncoding.EncodeToString(h[:12])
	}
	cases := []struct {
		r    Rule
		want string
	}{
		{Rule{Action: ActAccept}, hash("{Action:accept }")},
		{Rule{Proto: 6, Dst: Side{Ports: []PortRange{{80, 80}}}, Action: ActDrop, Counter: true},
			hash("{Proto:6 Dst:{Ports:[{First:80 Last:80}] } Action:drop Counter:true }")},
		{Rule{IPVersion: 4, Proto: 1, ICMP: &ICMPMatch{Type: 8, Code: -1}, Src: Side{Nets: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, Action: ActAccept},
			hash("{IPVersion:4 Proto:1 ICMP:{Type:8 Code:-1 } Src:{Nets:[10.0.0.0/8] } Action:accept }")},
		// An ICMP match of type 0 code 0 is set though its fields are zero.
		{Rule{Proto: 1, ICMP: &ICMPMatch{}, Action: ActAccept}, hash("{Proto:1 ICMP:{} Action:accept }")},
		{Rule{ID: "t/p/ingress/0", InIface: "cali1", Action: ActAccept}, "t/p/ingress/0 " + hash("{ID:t/p/ingress/0 InIface:cali1 Action:accept }")},
	}
	for _, c := range cases {
		if got := c.r.key(); got != c.want {
			t.Errorf("key of %+v = %s, want %s", c.r, got, c.want)
		}
	}
}

// Every field of Rule and Side, set alone, gives a key of its own.
func TestRuleKeyDistinguishesEveryField(t *testing.T) {
	seen := map[string]string{(&Rule{}).key(): "zero rule"}
	add := func(name string, r Rule) {
		k := r.key()
		if prev, ok := seen[k]; ok {
			t.Errorf("%s gives the key of %s", name, prev)
		}
		seen[k] = name
	}
	set := func(f reflect.Value) bool {
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(3)
		case reflect.Int:
			f.SetInt(3)
		case reflect.Pointer:
			f.Set(reflect.New(f.Type().Elem()))
		case reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 1, 1))
		default:
			return false
		}
		return true
	}
	rt := reflect.TypeOf(Rule{})
	for i := range rt.NumField() {
		var r Rule
		f := reflect.ValueOf(&r).Elem().Field(i)
		if f.Kind() == reflect.Struct {
			for j := range f.NumField() {
				var r2 Rule
				g := reflect.ValueOf(&r2).Elem().Field(i).Field(j)
				if !set(g) {
					t.Fatalf("%s.%s: kind %s not covered by this test", rt.Field(i).Name, f.Type().Field(j).Name, g.Kind())
				}
				add(rt.Field(i).Name+"."+f.Type().Field(j).Name, r2)
			}
			continue
		}
		if !set(f) {
			t.Fatalf("%s: kind %s not covered by this test", rt.Field(i).Name, f.Kind())
		}
		add(rt.Field(i).Name, r)
	}
}
