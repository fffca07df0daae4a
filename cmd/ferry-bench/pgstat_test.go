package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTagOfFindsTheStatementsTagComment(t *testing.T) {
	t.Parallel()
	for query, want := range map[string]string{
		"/* ferry:message_claim */\n\t\tWITH candidate AS (SELECT id FROM ferry.messages)": "ferry:message_claim",
		"/*ferry:event_append*/ WITH input AS (SELECT 1)":                                  "ferry:event_append",
		"SELECT 1 /* ferry:queue_delete_dead_letters */":                                   "ferry:queue_delete_dead_letters",
		"/* raw:group_read */ SELECT id FROM ferry.events":                                 "raw:group_read",
		"/* bench:waits */ SELECT wait_event FROM pg_stat_activity":                        "bench:waits",
		"/* ferry:consumer_group_fetch */ /* ferry:other */ SELECT 1":                      "ferry:consumer_group_fetch",
		"BEGIN":                                     untagged,
		"SELECT pg_notify($1, $2)":                  untagged,
		"/* a comment */ SELECT 1":                  untagged,
		"/* ferry: spaced */ SELECT 1":              untagged,
		"-- ferry:message_claim\nSELECT 1":          untagged,
		"WITH message_claim AS (SELECT 1) SELECT 1": untagged,
	} {
		require.Equal(t, want, tagOf(query), "query %q", query)
	}
}

func TestStatementClassesFollowTagsNotText(t *testing.T) {
	t.Parallel()
	stmts := stmtList{
		{query: "/* ferry:event_dedup_claim */ INSERT INTO ferry.event_dedup ...", tag: "ferry:event_dedup_claim", calls: 10, rows: 100},
		{query: "/* ferry:event_append */ WITH input AS ...", tag: "ferry:event_append", calls: 10, rows: 100},
		// A group statement that reads ferry.topic_partitions is still the
		// group's: only the publish transaction's tags count as publishing.
		{query: "/* ferry:consumer_group_fetch_available */ SELECT ... JOIN ferry.topic_partitions tp", tag: "ferry:consumer_group_fetch_available", calls: 7, rows: 7},
		{query: "/* ferry:consumer_group_fetch */ SELECT ...", tag: "ferry:consumer_group_fetch", calls: 5, rows: 4000, execMs: 2},
		{query: "BEGIN", tag: untagged, calls: 3},
		{query: "begin", tag: untagged, calls: 4},
		{query: "/* ferry:notify */ SELECT pg_notify($1, $2)", tag: notifyTag, calls: 2},
		{query: "SELECT * FROM river_job WHERE ...", tag: untagged, calls: 9},
	}
	group, publishing := splitPublishing(stmts)
	require.EqualValues(t, 10+10+3+2, publishing.calls(), "publish tags, upper-case BEGIN, the notifier's NOTIFY")
	require.EqualValues(t, 7+5+4+9, group.calls())
	require.EqualValues(t, 4000, stmts.tagged(groupFetchTag).rows())
	require.EqualValues(t, 10, stmts.tagged(publishClaimTag).calls())
	require.EqualValues(t, 9, stmts.where(stmtStat.isRiver).calls())
	require.EqualValues(t, 3+4+9, stmts.tagged(untagged).calls())
	require.InDelta(t, 2.0, stmts.execMs(), 1e-9)
	require.InDelta(t, 800.0, rowsPer(stmts.tagged(groupFetchTag), 5), 1e-9)
}

func TestStmtGridShowsTheTagBesideTheStatementWithoutIt(t *testing.T) {
	t.Parallel()
	stmts := stmtList{
		{query: "/* ferry:message_claim */\n\tWITH candidate AS (SELECT id | 1 FROM `x`)", tag: "ferry:message_claim", calls: 200, rows: 20000, execMs: 50},
		{query: "COMMIT", tag: untagged, calls: 100},
		{query: "SELECT 3", tag: untagged, calls: 1},
	}
	g := stmtGrid("caption", stmts, 100, "per request", 2)
	require.Equal(t, []string{"tag", "statement", "calls", "per request", "rows/call", "mean ms"}, g.Header)
	require.Equal(t, [][]string{
		{"`ferry:message_claim`", "`WITH candidate AS (SELECT id \\| 1 FROM 'x')`", "200", "2.00", "100.0", "0.250"},
		{"`untagged`", "`COMMIT`", "100", "1.00", "0.0", "0.000"},
	}, g.Rows, "limit 2 keeps the first two")
	require.Len(t, stmtGrid("all", stmts, 1, "per x", 0).Rows, 3, "limit 0 keeps all")
}
