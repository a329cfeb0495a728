package flowagg

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/routed-net/routed/felix/policy/flowrec"
)

// ErrFilter is returned for a filter that cannot be read.
var ErrFilter = errors.New("flowagg: invalid filter")

// Filter picks flows: every field set must hold. Gaps are kept when
// they concern the node asked for (or all nodes) and are recent enough.
type Filter struct {
	// Namespace and Pod match either end.
	Namespace, Pod string
	// Verdict is allow, deny or unknown.
	Verdict string
	// Policy matches a policy, profile or tier named in either trace or
	// among the staged verdicts (a PolicyKey such as "np:prod/web", or
	// its name alone).
	Policy string
	Port   int // destination port (ICMP: type); 0: any
	Node   string
	// Since keeps flows whose interval ended at or after it.
	Since time.Time
}

// Query renders the filter as URL parameters (ParseFilter's input).
func (f Filter) Query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"namespace": f.Namespace, "pod": f.Pod, "verdict": f.Verdict, "policy": f.Policy, "node": f.Node} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Port != 0 {
		q.Set("port", strconv.Itoa(f.Port))
	}
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	return q
}

// ParseFilter reads a filter from URL parameters: namespace, pod,
// verdict, policy, port, node, since (RFC 3339 or a duration before
// now, "5m").
func ParseFilter(q url.Values, now time.Time) (Filter, error) {
	f := Filter{Namespace: q.Get("namespace"), Pod: q.Get("pod"), Verdict: q.Get("verdict"), Policy: q.Get("policy"), Node: q.Get("node")}
	switch f.Verdict {
	case "", flowrec.Allow, flowrec.Deny, flowrec.Unknown:
	default:
		return f, fmt.Errorf("%w: verdict %q: want allow, deny or unknown", ErrFilter, f.Verdict)
	}
	if p := q.Get("port"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return f, fmt.Errorf("%w: port %q: want 1-65535", ErrFilter, p)
		}
		f.Port = n
	}
	if s := q.Get("since"); s != "" {
		var err error
		if f.Since, err = ParseSince(s, now); err != nil {
			return f, err
		}
	}
	return f, nil
}

// ParseSince reads an RFC 3339 time or a duration before now.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%w: since %q: a duration must be positive", ErrFilter, s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: since %q: want an RFC 3339 time or a duration such as 5m", ErrFilter, s)
	}
	return t, nil
}

// Keep says whether the entry passes the filter.
func (f Filter) Keep(e *Entry) bool {
	if g := e.Gap; g != nil {
		return (f.Node == "" || g.Node == "*" || g.Node == f.Node) && (f.Since.IsZero() || !g.To.Before(f.Since) || g.To.IsZero())
	}
	fl := e.Flow
	if fl == nil {
		return false
	}
	switch {
	case f.Namespace != "" && fl.Src.Namespace != f.Namespace && fl.Dst.Namespace != f.Namespace,
		f.Pod != "" && !podIs(fl.Src, f.Pod) && !podIs(fl.Dst, f.Pod),
		f.Verdict != "" && fl.Verdict != f.Verdict,
		f.Port != 0 && int(fl.DstPort) != f.Port,
		f.Node != "" && fl.Node != f.Node,
		!f.Since.IsZero() && fl.End.Before(f.Since),
		f.Policy != "" && !namesPolicy(fl, f.Policy):
		return false
	}
	return true
}

func podIs(e flowrec.End, pod string) bool {
	return e.Kind == flowrec.EndPod && (e.Name == pod || e.Namespace+"/"+e.Name == pod)
}

func namesPolicy(fl *flowrec.Flow, p string) bool {
	is := func(key string) bool {
		if key == "" {
			return false
		}
		if key == p {
			return true
		}
		// "np:prod/web" is also found as "web" or "prod/web".
		_, name, _ := strings.Cut(key, ":")
		return name == p || strings.HasSuffix(name, "/"+p)
	}
	for _, t := range []*flowrec.Trace{fl.Egress, fl.Ingress} {
		if t == nil {
			continue
		}
		for _, s := range t.Steps {
			if is(s.Policy) || (s.Profile != "" && s.Profile == p) || (s.Tier != "" && s.Tier == p) {
				return true
			}
		}
	}
	for _, s := range fl.Staged {
		if is(strings.TrimPrefix(s.Policy, "staged:")) || s.Policy == p {
			return true
		}
	}
	return false
}
