package cni_test

import (
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// logMark is where the plugins' log file ends now, so that the lines a
// phase of a benchmark writes can be read back (logSince).
func (n *node) logMark(b testing.TB) int64 {
	st, err := os.Stat(n.logFile)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		b.Fatal(err)
	}
	return st.Size()
}

// logSince returns what the plugins logged after mark.
func (n *node) logSince(b testing.TB, mark int64) string {
	f, err := os.Open(n.logFile)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(mark, io.SeekStart); err != nil {
		b.Fatal(err)
	}
	out, err := io.ReadAll(f)
	if err != nil {
		b.Fatal(err)
	}
	return string(out)
}

var (
	timingsRe = regexp.MustCompile(`timings="([^"]*)"`)
	verbRe    = regexp.MustCompile(`verb=(\w+)`)
)

// reportSteps breaks the direct column's ADD and DEL down from the
// plugins' "timings" debug lines (cniplugin/plugin/timings.go) in log:
// per step, the median over calls of its milliseconds (etcd requests
// summed per kind, with their median count per call), for the
// socket-only build's part ("thin", before it hands over) and the full
// build's. "inplugin" is the median of each call's steps summed; what
// the column's p50 has on top of the two is process start-up (two
// execs, the Go runtime, package initialisation) and libcni.
func reportSteps(b *testing.B, log string) {
	type key struct{ verb, build, step string }
	perCall := map[key][]float64{}
	for _, line := range strings.Split(log, "\n") {
		m, v := timingsRe.FindStringSubmatch(line), verbRe.FindStringSubmatch(line)
		if m == nil || v == nil {
			continue
		}
		build := "full"
		switch {
		case strings.Contains(line, "handing the"):
			build = "thin"
		case !strings.Contains(m[1], "dial="):
			continue // a call routed served (the daemon column)
		}
		sums, counts := map[string]float64{}, map[string]float64{}
		var total float64
		for _, f := range strings.Fields(m[1]) {
			name, val, _ := strings.Cut(f, "=")
			ms, err := strconv.ParseFloat(val, 64)
			if err != nil {
				continue
			}
			sums[name] += ms
			if strings.HasPrefix(name, "etcd.") {
				counts[name]++
			} else {
				total += ms
			}
		}
		sums["inplugin"] = total
		for name, ms := range sums {
			k := key{v[1], build, name}
			perCall[k] = append(perCall[k], ms)
		}
		for name, c := range counts {
			k := key{v[1], build, name + "-count"}
			perCall[k] = append(perCall[k], c)
		}
	}
	for k, vals := range perCall {
		slices.Sort(vals)
		unit := "-ms"
		if strings.HasSuffix(k.step, "-count") {
			unit = ""
		}
		b.ReportMetric(vals[len(vals)/2], "direct-"+strings.ToLower(k.verb)+"-"+k.build+"-"+k.step+unit)
	}
}
