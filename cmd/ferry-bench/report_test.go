package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReportLabelsCellsOfSectionsWithTheirOwnColumns(t *testing.T) {
	t.Parallel()
	rep := &Report{Sections: []*Section{
		{Number: 3, Title: "Receive + ack", Rows: []Row{{Metric: "m", Raw: "1", Ferry: "2", Ratio: "2.00×", Target: "t", Pass: pass(true)}}},
		{Number: 11, Title: "Cold start", Columns: &Columns{Raw: "warm", Ferry: "cold", Ratio: "cold/warm"},
			Rows: []Row{{Metric: "p50", Raw: "5.00 ms", Ferry: "380 ms", Ratio: "76.00×", Target: "≤ 1.5×", Pass: pass(false)}}},
	}}
	md := rep.Markdown()
	require.Contains(t, md, "| 3 | Receive + ack | m | 1 | 2 | 2.00× | t | ✓ |")
	require.Contains(t, md, "| 11 | Cold start | p50 | warm: 5.00 ms | cold: 380 ms | cold/warm: 76.00× | ≤ 1.5× | ✗ |")
	require.Contains(t, md, "## 11. Cold start\n\n| metric | warm | cold | cold/warm | target | |\n")
	require.Contains(t, md, "## 3. Receive + ack\n\n| metric | raw SQL | Ferry | Ferry/raw | target | |\n", "other sections keep theirs")
	require.Equal(t, 1, strings.Count(md, "| warm |"), "only the cold-start section has them")
}
