package statuscli

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// clock is the time ages and "since" columns are measured against; tests
// pin it so rendered ages do not depend on how long the test took.
var clock = time.Now

// table renders rows either boxed (calicoctl style) or as plain aligned
// columns (birdc style).
type table struct {
	header []string
	rows   [][]string
	plain  bool
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(out io.Writer) {
	w := make([]int, len(t.header))
	for i, h := range t.header {
		w[i] = utf8.RuneCountInString(h)
	}
	for _, r := range t.rows {
		for i, c := range r {
			w[i] = max(w[i], utf8.RuneCountInString(c))
		}
	}
	if t.plain {
		line := func(cells []string) {
			var b strings.Builder
			for i, c := range cells {
				if i == len(cells)-1 {
					b.WriteString(c)
					break
				}
				b.WriteString(pad(c, w[i]))
				b.WriteString("  ")
			}
			fmt.Fprintln(out, strings.TrimRight(b.String(), " "))
		}
		line(t.header)
		for _, r := range t.rows {
			line(r)
		}
		return
	}
	sep := "+"
	for _, n := range w {
		sep += strings.Repeat("-", n+2) + "+"
	}
	line := func(cells []string, center bool) {
		b := "|"
		for i, c := range cells {
			if center {
				b += " " + centerPad(c, w[i]) + " |"
			} else {
				b += " " + pad(c, w[i]) + " |"
			}
		}
		fmt.Fprintln(out, b)
	}
	fmt.Fprintln(out, sep)
	line(t.header, true)
	fmt.Fprintln(out, sep)
	for _, r := range t.rows {
		line(r, false)
	}
	fmt.Fprintln(out, sep)
}

func pad(s string, n int) string {
	return s + strings.Repeat(" ", n-utf8.RuneCountInString(s))
}

func centerPad(s string, n int) string {
	gap := n - utf8.RuneCountInString(s)
	left := gap / 2
	return strings.Repeat(" ", left) + s + strings.Repeat(" ", gap-left)
}

// since formats a state change time as calicoctl does: the time of day
// when it was today, the date otherwise.
func since(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	t = t.Local()
	y1, m1, d1 := t.Date()
	y2, m2, d2 := now.Local().Date()
	if y1 == y2 && m1 == m2 && d1 == d2 {
		return t.Format("15:04:05")
	}
	return t.Format("2006-01-02")
}

// age formats how long ago t was: 42s, 3m12s, 5h02m, 3d04h.
func age(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}
