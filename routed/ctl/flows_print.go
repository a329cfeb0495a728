package ctl

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/routed/flowagg"
)

// flowPrinter prints entries as a table (flushed per entry, so
// --follow shows each at once) or as JSON lines.
type flowPrinter struct {
	out    io.Writer
	o      string
	tw     *tabwriter.Writer
	header bool
}

func newFlowPrinter(out io.Writer, o string) *flowPrinter {
	return &flowPrinter{out: out, o: o, tw: tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)}
}

func (p *flowPrinter) print(e flowagg.Entry) error {
	if p.o == "json" {
		return json.NewEncoder(p.out).Encode(e)
	}
	if !p.header {
		fmt.Fprintln(p.tw, "END\tNODE\tSOURCE\tDESTINATION\tPROTO/PORT\tVERDICT\tRULE\tCONNS\tBYTES OUT/IN\tSTAGED")
		p.header = true
	}
	if g := e.Gap; g != nil {
		fmt.Fprintf(p.tw, "%s\t%s\tGAP: %s%s\n", g.To.Local().Format("15:04:05"), esc(g.Node), esc(g.Reason), esc(gapDetail(g)))
		return p.tw.Flush()
	}
	f := e.Flow
	fmt.Fprintf(p.tw, "%s\t%s\t%s\t%s\t%s/%d\t%s\t%s\t%d\t%d/%d\t%s\n", f.End.Local().Format("15:04:05"), esc(f.Node), esc(endName(f.Src)), esc(endName(f.Dst)),
		esc(f.Proto), f.DstPort, esc(f.Verdict), esc(ruleName(decidingRule(f))), f.Started+f.Denied, f.BytesOut, f.BytesIn, esc(stagedSummary(f.Staged)))
	if p.o == "wide" {
		for _, x := range []struct {
			dir string
			t   *flowrec.Trace
		}{{"egress", f.Egress}, {"ingress", f.Ingress}} {
			if x.t == nil {
				continue
			}
			for _, s := range x.t.Steps {
				fmt.Fprintf(p.tw, "\t\t  %s: %s\n", x.dir, esc(ruleName(s)))
			}
		}
		for _, s := range f.Staged {
			if s.Error != "" {
				fmt.Fprintf(p.tw, "\t\t  staged %s: %s\n", esc(s.Policy), esc(s.Error))
			}
		}
	}
	return p.tw.Flush()
}

// esc escapes control and non-printable characters (a terminal's
// escape sequences, tabs that would shift the columns) as Go escapes:
// names and errors in flows come from the nodes' datastore, not from
// routedctl.
func esc(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) || r == utf8.RuneError }) {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

func (p *flowPrinter) flush() { _ = p.tw.Flush() }

func gapDetail(g *flowagg.Gap) string {
	var b strings.Builder
	if !g.From.IsZero() {
		fmt.Fprintf(&b, " from %s", g.From.Local().Format("15:04:05"))
	}
	if g.Evicted > 0 {
		fmt.Fprintf(&b, " (%d entries)", g.Evicted)
	}
	if len(g.Dropped) > 0 {
		fmt.Fprintf(&b, " dropped %v", g.Dropped)
	}
	return b.String()
}

func endName(e flowrec.End) string {
	switch e.Kind {
	case flowrec.EndPod:
		return e.Namespace + "/" + e.Name
	case flowrec.EndNetworkSet:
		return "set:" + e.Name + "(" + e.Addr + ")"
	}
	return e.Addr
}

// decidingRule is the rule behind the verdict: a denying direction's,
// else the ingress's, else the egress's.
func decidingRule(f *flowrec.Flow) policy.RuleInfo {
	for _, t := range []*flowrec.Trace{f.Egress, f.Ingress} {
		if t != nil && t.Verdict == flowrec.Deny {
			return t.Decider()
		}
	}
	if f.Ingress != nil {
		return f.Ingress.Decider()
	}
	return f.Egress.Decider()
}

func ruleName(r policy.RuleInfo) string {
	switch {
	case r.ID == "" && r.Kind == "":
		return "-"
	case r.Policy != "":
		return fmt.Sprintf("%s %s/%s[%d] %s", r.Direction, r.Tier, r.Policy, r.Index, r.Action)
	case r.Profile != "":
		return fmt.Sprintf("%s profile %s[%d] %s", r.Direction, r.Profile, r.Index, r.Action)
	}
	return fmt.Sprintf("%s %s %s %s", r.Direction, r.Kind, r.Tier, r.Action)
}

func stagedSummary(vs []policy.StagedVerdict) string {
	if len(vs) == 0 {
		return "-"
	}
	var out []string
	for _, v := range vs {
		verdict := "deny"
		if v.Allowed {
			verdict = "allow"
		}
		out = append(out, strings.TrimPrefix(v.Policy, "staged:")+"="+verdict)
	}
	return strings.Join(out, ",")
}
