package main

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/routed-net/routed/tests/lab"
)

// mapping is one line of /proc/PID/smaps with its resident kB.
type mapping struct {
	name          string // address range, permissions and path ("[anon]" when none)
	rss, anon, sz int    // kB: Rss, Anonymous, Size
}

// readSmaps reads every mapping of pid with its Rss and Anonymous kB.
func readSmaps(pid int) ([]mapping, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			name := "[anon]"
			if len(fields) >= 6 {
				name = strings.Join(fields[5:], " ")
			}
			out = append(out, mapping{name: fields[0] + " " + fields[1] + " " + name})
			continue
		}
		if len(out) == 0 || len(fields) < 2 {
			continue
		}
		kb, _ := strconv.Atoi(fields[1])
		switch fields[0] {
		case "Rss:":
			out[len(out)-1].rss = kb
		case "Anonymous:":
			out[len(out)-1].anon = kb
		case "Size:":
			out[len(out)-1].sz = kb
		}
	}
	return out, sc.Err()
}

// smapsSnapshots keeps each node's mappings at named points of the run.
type smapsSnapshots map[string]map[string][]mapping // tag -> node -> mappings

func (s smapsSnapshots) take(l *lab.Lab, tag string) {
	s[tag] = map[string][]mapping{}
	for _, n := range l.Topo.Nodes {
		m, err := readSmaps(l.NodePID(n.Name))
		if err != nil {
			fmt.Printf("smaps of %s (%s): %v\n", n.Name, tag, err)
			continue
		}
		s[tag][n.Name] = m
	}
}

// growth prints, for every node, the mappings whose resident kB changed
// between the two snapshots (the Go heap arenas, the runtime's metadata,
// thread stacks and the executable are separate mappings).
func (s smapsSnapshots) growth(from, to string) string {
	var b strings.Builder
	nodes := make([]string, 0, len(s[to]))
	for n := range s[to] {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, node := range nodes {
		before := map[string]mapping{}
		for _, m := range s[from][node] {
			before[m.name] = m
		}
		type delta struct {
			m           mapping
			drss, danon int
		}
		var ds []delta
		total, totalAnon := 0, 0
		for _, m := range s[to][node] {
			p := before[m.name]
			delete(before, m.name)
			if m.rss != p.rss || m.anon != p.anon {
				ds = append(ds, delta{m, m.rss - p.rss, m.anon - p.anon})
				total, totalAnon = total+m.rss-p.rss, totalAnon+m.anon-p.anon
			}
		}
		for _, p := range before { // mappings gone by the end
			ds = append(ds, delta{mapping{name: p.name + " (gone)"}, -p.rss, -p.anon})
			total, totalAnon = total-p.rss, totalAnon-p.anon
		}
		sort.Slice(ds, func(i, j int) bool { return abs(ds[i].drss) > abs(ds[j].drss) })
		fmt.Fprintf(&b, "==> %s: resident kB by mapping, %s -> %s: %+d (anonymous %+d), %d mappings changed\n", node, from, to, total, totalAnon, len(ds))
		for i, d := range ds {
			if i == 12 {
				break
			}
			fmt.Fprintf(&b, "  %+7d kB rss %+7d kB anon  now %6d of %8d kB  %s\n", d.drss, d.danon, d.m.rss, d.m.sz, d.m.name)
		}
	}
	return b.String()
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
