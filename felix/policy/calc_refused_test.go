package policy

import (
	"errors"
	"testing"

	"github.com/routed-net/routed/felix/policy/nftdp"
)

// refusingSink is a recSink that refuses one chain's rules, as nftdp
// refuses a rule it cannot write.
type refusingSink struct {
	*recSink
	refuse string
}

func (s *refusingSink) SetChain(name string, rules []nftdp.Rule) error {
	if name == s.refuse && !(len(rules) == 1 && rules[0].Action == nftdp.ActDrop && rules[0].ID == "") {
		return errors.New("refused for the test")
	}
	return s.recSink.SetChain(name, rules)
}

// TestRefusedChainFailsClosed: a chain the dataplane refuses does not
// keep the rules it held before (an Allow here): it becomes a single
// drop, and its rule IDs are no longer resolved.
func TestRefusedChainFailsClosed(t *testing.T) {
	s := &refusingSink{recSink: newRecSink()}
	c := NewCalc(s, LogConfig{})
	mustPolicy(t, c, gnpYAML("web", "10", "default", "  selector: app == 'web'\n  ingress: [{action: Allow, source: {selector: app == 'client'}}]"))
	c.SetEndpoint(ep("w1", true, "10.0.0.1", map[string]string{"app": "web"}))
	rules := s.chains["pi-gnp:web"]
	if len(rules) == 0 || rules[len(rules)-1].Action != nftdp.ActAccept {
		t.Fatalf("before the refusal: chain pi-gnp:web = %+v, want its Allow", rules)
	}
	s.refuse = "pi-gnp:web"
	mustPolicy(t, c, gnpYAML("web", "10", "default", "  selector: app == 'web'\n  ingress: [{action: Allow, source: {selector: app == 'other'}}]"))
	rules = s.chains["pi-gnp:web"]
	if len(rules) != 1 || rules[0].Action != nftdp.ActDrop || len(rules[0].Src.Sets) != 0 {
		t.Fatalf("after the refusal: chain pi-gnp:web = %+v, want a single unconditional drop", rules)
	}
	if _, _, ok := c.Index().Resolve(flowRulePrefix + ruleToken("pi-gnp:web/0")); ok {
		t.Error("the refused chain's rule ID still resolves")
	}
}
