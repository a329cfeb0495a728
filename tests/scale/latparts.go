package main

import (
	"fmt"
	"time"
)

// latParts splits claim -> every FIB into where the time goes: the
// owner's own kernel (its blackhole route, felix reading the claim from
// its feed), the first other node's (the owner's speaker advertising it
// and a route reflector passing it on), and the spread from the first
// other node to the last (the reflectors' fan-out and every node's
// speaker and felix).
type latParts struct {
	owner, first, spread []float64
}

func (l *latParts) add(owner string, claimed time.Time, seen map[string]time.Time) {
	var first, last time.Time
	for n, t := range seen {
		if n == owner {
			l.owner = append(l.owner, ms(max(0, t.Sub(claimed))))
			continue
		}
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	if !first.IsZero() {
		l.first = append(l.first, ms(max(0, first.Sub(claimed))))
		l.spread = append(l.spread, ms(last.Sub(first)))
	}
}

func (l *latParts) print() {
	fmt.Printf("claim->owner's FIB p50 %.0f ms p99 %.0f ms; claim->first other FIB p50 %.0f ms p99 %.0f ms; first other->last p50 %.0f ms p99 %.0f ms\n",
		pct(l.owner, 50), pct(l.owner, 99), pct(l.first, 50), pct(l.first, 99), pct(l.spread, 50), pct(l.spread, 99))
}
