package console

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
