package console

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// TestLineChartPlacesSamples proves the SVG arithmetic on known samples:
// a sample an hour old sits at the left edge, one now at the right, the
// largest value at the top of the plot and half of it halfway; the axis
// shows the largest value, and the title and labels are escaped.
func TestLineChartPlacesSamples(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	s := series{label: `<b>depth</b>`, color: "#2456c7", points: []point{
		{now.Add(-time.Hour), 0}, {now.Add(-30 * time.Minute), 5}, {now, 10},
	}}
	svg := string(lineChart(`Depth <script>&`, now, s))
	require.Contains(t, svg, `<polyline points="28.0,132.0 314.0,76.0 600.0,20.0" fill="none" stroke="#2456c7"`)
	require.Equal(t, 3, strings.Count(svg, "<circle "))
	require.Contains(t, svg, `fill="#667085">10</text>`)
	require.Contains(t, svg, "Depth &lt;script&gt;&amp;")
	require.Contains(t, svg, "&lt;b&gt;depth&lt;/b&gt;")
	require.NotContains(t, svg, "<script")
	require.NotContains(t, svg, "<b>")
	require.NotContains(t, svg, "no traffic")
}

// TestLineChartWithoutSamples proves an empty chart says there was no
// traffic and draws no line.
func TestLineChartWithoutSamples(t *testing.T) {
	svg := string(groupChart(nil, time.Now()))
	require.Contains(t, svg, "no traffic in the last hour")
	require.Contains(t, svg, `<polyline points=""`, "an empty line, no point")
	require.NotContains(t, svg, "<circle ")
}

// values are a series' points as minute offsets from base and values.
func values(s series, base time.Time) map[int]int64 {
	out := map[int]int64{}
	for _, p := range s.points {
		out[int(p.at.Sub(base)/time.Minute)] = p.v
	}
	return out
}

// TestQueueSeriesFromTotals proves the arithmetic of a queue's lines:
// the depth holds from the base sample before the window through minutes
// without a sample; sent is the rise of the added total, acked what left
// (the rise of added less the rise of depth) other than as dead letters;
// a minute without a sample sent and acked nothing; a sample without
// totals (an older binary's) gives no rate.
func TestQueueSeriesFromTotals(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 30, 0, time.UTC)
	start := now.Truncate(time.Minute).Add(-chartWindow) // 11:00
	at := func(m int) time.Time { return start.Add(time.Duration(m) * time.Minute) }
	samples := []store.QueueSample{
		{Minute: at(-2), Depth: 10, Added: 100, Totals: true},
		{Minute: at(30), Depth: 12, DeadLetters: 1, Added: 110, DeadLettered: 1, Totals: true},
		{Minute: at(31), Depth: 12, DeadLetters: 1, Added: 115, DeadLettered: 1, Totals: true},
		{Minute: at(40), Depth: 3, DeadLetters: 1},
	}
	depth, dead, sent, acked := queueSeries(samples, now)
	require.Len(t, depth.points, 61, "one point a minute, the base carried into the window")
	d := values(depth, start)
	require.Equal(t, int64(10), d[0])
	require.Equal(t, int64(10), d[29])
	require.Equal(t, int64(12), d[30])
	require.Equal(t, int64(12), d[39])
	require.Equal(t, int64(3), d[60])
	require.Equal(t, int64(1), values(dead, start)[45])
	s, a := values(sent, start), values(acked, start)
	require.Len(t, sent.points, 61)
	require.Equal(t, int64(10), s[30])
	require.Equal(t, int64(7), a[30], "10 came, depth rose 2, 1 was dead-lettered: 7 acked")
	require.Equal(t, int64(5), s[31])
	require.Equal(t, int64(5), a[31])
	require.Zero(t, s[20]+a[20]+s[40]+a[40], "no sample, or no totals: no traffic counted")

	// A queue's first sample ever counts from zero.
	_, _, sent, acked = queueSeries([]store.QueueSample{{Minute: at(50), Depth: 2, Added: 5, Totals: true}}, now)
	require.Len(t, sent.points, 11)
	require.Equal(t, int64(5), values(sent, start)[50])
	require.Equal(t, int64(3), values(acked, start)[50])
}

// TestTopicChartCountsPublished proves the topic's line: events published
// a minute, from the published totals of its samples.
func TestTopicChartCountsPublished(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	svg := string(topicChart([]store.Sample{{Minute: now.Add(-90 * time.Minute), Value: 1000}, {Minute: now.Add(-time.Minute), Value: 1042}}, now))
	require.Contains(t, svg, "Events published a minute")
	require.Contains(t, svg, `fill="#667085">42</text>`, "the largest minute: 42 events")
	pts := svg[strings.Index(svg, `<polyline points="`)+len(`<polyline points="`):]
	require.Len(t, strings.Fields(pts[:strings.Index(pts, `"`)]), 61, "a point a minute")
}
