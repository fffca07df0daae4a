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

// chartSize is a chart's drawing box (it scales to the page's width).
const chartW, chartH, chartPad = 600.0, 160.0, 28.0

// lineChart draws the series over the window ending at now: each
// minute's value at its minute, a line through them, the largest value
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
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="11" fill="#667085">−60 min</text><text x="%.0f" y="%.0f" font-size="11" fill="#667085" text-anchor="end">now</text>`,
		chartPad, chartH-8, chartW-2, chartH-8)
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

// polyline is one series' line (and a dot at each sample).
func polyline(s series, now time.Time, maxV int64) string {
	var pts, dots strings.Builder
	for _, p := range s.points {
		x := chartPad + (chartW-chartPad)*(1-now.Sub(p.at).Seconds()/chartWindow.Seconds())
		y := (chartH - chartPad) - (chartH-chartPad-20)*float64(p.v)/float64(maxV)
		fmt.Fprintf(&pts, "%.1f,%.1f ", x, y)
		fmt.Fprintf(&dots, `<circle cx="%.1f" cy="%.1f" r="2" fill="%s"/>`, x, y, s.color)
	}
	return fmt.Sprintf(`<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`, strings.TrimSpace(pts.String()), s.color) + dots.String()
}

// queueCharts draws a queue's or subscription's last hour: depth and dead
// letters, and messages sent and acked a minute.
func queueCharts(samples []store.QueueSample, now time.Time) []template.HTML {
	var depth, dead, sent, acked series
	depth = series{label: "depth", color: "#2456c7"}
	dead = series{label: "dead letters", color: "#b42318"}
	sent = series{label: "sent / min", color: "#067647"}
	acked = series{label: "acked / min", color: "#b54708"}
	for _, s := range samples {
		depth.points = append(depth.points, point{s.Minute, s.Depth})
		dead.points = append(dead.points, point{s.Minute, s.DeadLetters})
		sent.points = append(sent.points, point{s.Minute, s.Sent})
		acked.points = append(acked.points, point{s.Minute, s.Acked})
	}
	return []template.HTML{lineChart("Depth, last hour", now, depth, dead), lineChart("Sent and acked a minute, last hour", now, sent, acked)}
}

// groupChart draws a group's total lag over the last hour.
func groupChart(samples []store.GroupSample, now time.Time) template.HTML {
	lag := series{label: "lag", color: "#2456c7"}
	for _, s := range samples {
		lag.points = append(lag.points, point{s.Minute, s.Lag})
	}
	return lineChart("Lag, last hour", now, lag)
}
