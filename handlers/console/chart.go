package console

import (
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/ferry-mq/ferry/store"
)

// Charts are drawn on the server as inline SVG: numbers and fixed words
// only, so nothing in them comes from a user (no escaping to get wrong),
// and they need no script and no style attribute (the CSP allows neither).

// chartWindow is what a chart shows: the last hour.
const chartWindow = time.Hour

// series is one line of a chart.
type series struct {
	label, color string
	points       []point
}

type point struct {
	at time.Time
	v  int64
}

// maxDots is the most points a line marks with dots.
const maxDots = 15

// chartSize is a chart's drawing box (it scales to the page's width).
const chartW, chartH, chartPad = 600.0, 160.0, 28.0

// lineChart draws the series over the window ending at now's minute:
// each minute's value at its minute, a line through them, the largest value
// on the axis, and a legend. With no sample it says so.
func lineChart(title string, now time.Time, ss ...series) template.HTML {
	maxV, any := int64(1), false
	for _, s := range ss {
		for _, p := range s.points {
			maxV, any = max(maxV, p.v), true
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<figure class="chart"><figcaption>%s</figcaption><svg viewBox="0 0 %.0f %.0f" role="img" aria-label="%s">`,
		template.HTMLEscapeString(title), chartW, chartH, template.HTMLEscapeString(title))
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#d9dee7"/>`, chartPad, chartH-chartPad, chartW, chartH-chartPad)
	fmt.Fprintf(&b, `<text x="2" y="12" font-size="11" fill="#667085">%d</text><text x="2" y="%.0f" font-size="11" fill="#667085">0</text>`, maxV, chartH-chartPad)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="11" fill="#667085">−60 min</text><text x="%.0f" y="%.0f" font-size="11" fill="#667085" text-anchor="middle">−30 min</text><text x="%.0f" y="%.0f" font-size="11" fill="#667085" text-anchor="end">now</text>`,
		chartPad, chartH-8, chartPad+(chartW-chartPad)/2, chartH-8, chartW-2, chartH-8)
	if !any {
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="13" fill="#667085" text-anchor="middle">no traffic in the last hour</text>`, chartW/2, chartH/2)
	}
	for i, s := range ss {
		b.WriteString(polyline(s, now, maxV))
		fmt.Fprintf(&b, `<rect x="%.0f" y="4" width="10" height="10" fill="%s"/><text x="%.0f" y="13" font-size="11" fill="#1d2430">%s</text>`,
			chartPad+40+float64(i)*110, s.color, chartPad+54+float64(i)*110, template.HTMLEscapeString(s.label))
	}
	b.WriteString(`</svg></figure>`)
	return template.HTML(b.String()) //nolint:gosec // built above from numbers and escaped fixed words only
}

// polyline is one series' line, with a dot at each point when there are
// few (a line of one point shows only as its dot).
func polyline(s series, now time.Time, maxV int64) string {
	var pts, dots strings.Builder
	for _, p := range s.points {
		x := chartPad + (chartW-chartPad)*(1-now.Truncate(time.Minute).Sub(p.at).Seconds()/chartWindow.Seconds())
		y := (chartH - chartPad) - (chartH-chartPad-20)*float64(p.v)/float64(maxV)
		fmt.Fprintf(&pts, "%.1f,%.1f ", x, y)
		if len(s.points) <= maxDots {
			fmt.Fprintf(&dots, `<circle cx="%.1f" cy="%.1f" r="2" fill="%s"/>`, x, y, s.color)
		}
	}
	return fmt.Sprintf(`<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`, strings.TrimSpace(pts.String()), s.color) + dots.String()
}

// minutes are the starts of the chart's minutes: the window's, oldest
// first, the last one now's.
func minutes(now time.Time) []time.Time {
	last := now.Truncate(time.Minute)
	out := make([]time.Time, 0, int(chartWindow/time.Minute)+1)
	for m := last.Add(-chartWindow); !m.After(last); m = m.Add(time.Minute) {
		out = append(out, m)
	}
	return out
}

// levels is a value that holds until it changes (a depth, a lag) at each
// minute from the first sample on: samples are written only when what
// they read changed, so a minute without one kept the value before it.
func levels(ms []time.Time, at []time.Time, value func(i int) int64) []point {
	var out []point
	j := -1
	for _, m := range ms {
		for j+1 < len(at) && !at[j+1].After(m) {
			j++
		}
		if j >= 0 {
			out = append(out, point{m, value(j)})
		}
	}
	return out
}

// rates is a total's increase (from delta) in each minute after the first
// sample: the difference from the sample before it in that minute's
// sample, 0 in a minute without one (the total did not change then).
func rates(ms []time.Time, at []time.Time, delta func(i int) (int64, bool)) []point {
	var out []point
	byMinute := map[time.Time]int64{}
	for i := 1; i < len(at); i++ {
		if d, ok := delta(i); ok {
			byMinute[at[i].Truncate(time.Minute)] = max(d, 0)
		}
	}
	for _, m := range ms {
		if len(at) > 0 && m.After(at[0]) {
			out = append(out, point{m, byMinute[m]})
		}
	}
	return out
}

// queueCharts draws a queue's or subscription's last hour: depth and dead
// letters, and messages sent and acked a minute. Sent is what came in
// (sends, fan-out, redrives, moves); acked is what left other than as a
// dead letter (acks, and purges, moves out, expiry): the change of the
// totals and the depth between two samples.
func queueCharts(samples []store.QueueSample, now time.Time) []template.HTML {
	depth, dead, sent, acked := queueSeries(samples, now)
	return []template.HTML{lineChart("Depth, last hour", now, depth, dead), lineChart("Sent and acked a minute, last hour", now, sent, acked)}
}

// queueSeries are the lines of queueCharts.
func queueSeries(samples []store.QueueSample, now time.Time) (depth, dead, sent, acked series) {
	ms := minutes(now)
	at := make([]time.Time, len(samples))
	for i, s := range samples {
		at[i] = s.Minute
	}
	depth = series{label: "depth", color: "#2456c7", points: levels(ms, at, func(i int) int64 { return samples[i].Depth })}
	dead = series{label: "dead letters", color: "#b42318", points: levels(ms, at, func(i int) int64 { return samples[i].DeadLetters })}
	// A first sample inside the window is the target's first ever (a
	// sample's base is kept): its totals count from zero, a minute before.
	if len(samples) > 0 && !samples[0].Minute.Before(ms[0]) && samples[0].Totals {
		samples = append([]store.QueueSample{{Minute: samples[0].Minute.Add(-time.Minute), Totals: true}}, samples...)
		at = append([]time.Time{samples[0].Minute}, at...)
	}
	both := func(i int) bool { return samples[i].Totals && samples[i-1].Totals }
	sent = series{label: "sent / min", color: "#067647", points: rates(ms, at, func(i int) (int64, bool) {
		return samples[i].Added - samples[i-1].Added, both(i)
	})}
	acked = series{label: "acked / min", color: "#b54708", points: rates(ms, at, func(i int) (int64, bool) {
		s, p := samples[i], samples[i-1]
		left := (s.Added - p.Added) - (s.Depth - p.Depth)
		return left - (s.DeadLettered - p.DeadLettered), both(i)
	})}
	return depth, dead, sent, acked
}

// groupChart draws a group's total lag over the last hour.
func groupChart(samples []store.Sample, now time.Time) template.HTML {
	at := make([]time.Time, len(samples))
	for i, s := range samples {
		at[i] = s.Minute
	}
	lag := series{label: "lag", color: "#2456c7", points: levels(minutes(now), at, func(i int) int64 { return samples[i].Value })}
	return lineChart("Lag, last hour", now, lag)
}

// topicChart draws a topic's events published a minute over the last
// hour (from its partitions' offsets, sampled).
func topicChart(samples []store.Sample, now time.Time) template.HTML {
	at := make([]time.Time, len(samples))
	for i, s := range samples {
		at[i] = s.Minute
	}
	published := series{label: "published / min", color: "#067647", points: rates(minutes(now), at, func(i int) (int64, bool) {
		return samples[i].Value - samples[i-1].Value, true
	})}
	return lineChart("Events published a minute, last hour", now, published)
}
