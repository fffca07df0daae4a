package main

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Statement counts from pg_stat_statements, shared by the scenarios that
// count SQL (7, 9 and 10). Statements are told apart by their stable tag
// comment, `/* ferry:message_claim */`, which every hot statement of
// store/ carries (and which a rename of a CTE or a table leaves alone);
// the bench's own raw-SQL statements carry `/* raw:... */` and its
// bookkeeping `/* bench:... */`. A statement without a tag is "untagged":
// BEGIN and COMMIT, River's, and any statement of Ferry's that lost its
// tag, which the statement grids then show.

// statementTag finds a statement's tag comment.
var statementTag = regexp.MustCompile(`/\*\s*((?:ferry|raw|bench):[a-z0-9_]+)\s*\*/`)

// untagged is the tag of a statement without one.
const untagged = "untagged"

// tagOf is the first tag comment in a statement, or untagged.
func tagOf(query string) string {
	if m := statementTag.FindStringSubmatch(query); m != nil {
		return m[1]
	}
	return untagged
}

// publishTags are the statements of a publish transaction
// (store/event_publish.go), and publishClaimTag its first statement, whose
// calls count the transactions.
func publishTags() []string {
	return []string{"ferry:event_dedup_claim_wait", "ferry:event_dedup_claim", "ferry:event_dedup_claim_wait_end",
		"ferry:event_dedup_read", "ferry:topic_subscriptions_read",
		"ferry:topic_partitions_lock", "ferry:topic_subscriptions_check", "ferry:event_group_locks", "ferry:event_append"}
}

const publishClaimTag = "ferry:event_dedup_claim"

// stmtStat is one normalised statement's counters over a phase.
type stmtStat struct {
	query  string
	tag    string
	calls  int64
	rows   int64
	execMs float64
}

// isRiver says whether an untagged statement is River's (its tables and
// functions are all named river_...).
func (s stmtStat) isRiver() bool {
	return s.tag == untagged && strings.Contains(strings.ToLower(s.query), "river")
}

// isTxControl says whether a statement is a BEGIN or COMMIT sent as a
// plain statement in upper case (the publisher's and sender's pipelined
// transactions; pgx's own transactions send them in lower case).
func (s stmtStat) isTxControl() bool {
	q := strings.TrimSpace(s.query)
	return q == "BEGIN" || q == "COMMIT"
}

// isNotify says whether a statement is the notifier's NOTIFY
// (store/notifier.go, ferry:notify).
func (s stmtStat) isNotify() bool {
	return s.tag == notifyTag
}

// notifyTag is the tag of the notifier's NOTIFY.
const notifyTag = "ferry:notify"

// stmtList is the statements of a phase, most calls first.
type stmtList []stmtStat

// calls is the statements executed.
func (l stmtList) calls() (n int64) {
	for _, s := range l {
		n += s.calls
	}
	return n
}

// execMs is PostgreSQL's execution time of them, in milliseconds.
func (l stmtList) execMs() (ms float64) {
	for _, s := range l {
		ms += s.execMs
	}
	return ms
}

// rows is the rows they returned or changed.
func (l stmtList) rows() (n int64) {
	for _, s := range l {
		n += s.rows
	}
	return n
}

// tagged is the statements with one of the tags.
func (l stmtList) tagged(tags ...string) stmtList {
	return l.where(func(s stmtStat) bool { return slices.Contains(tags, s.tag) })
}

// where is the statements for which keep holds.
func (l stmtList) where(keep func(stmtStat) bool) stmtList {
	var out stmtList
	for _, s := range l {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

// statementsOf resets pg_stat_statements, runs fn and returns what this
// database executed meanwhile, but for the bench's own bookkeeping, and
// River's background statements unless withRiver.
func (b *Bench) statementsOf(ctx context.Context, withRiver bool, fn func() error) (stmtList, error) {
	if _, err := b.raw.Exec(ctx, `/* bench:statements_reset */ SELECT pg_stat_statements_reset()`); err != nil {
		return nil, err
	}
	if err := fn(); err != nil {
		return nil, err
	}
	rows, err := b.raw.Query(ctx, `/* bench:statements_read */
		SELECT query, calls, rows, total_exec_time FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY calls DESC, query`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out stmtList
	for rows.Next() {
		var s stmtStat
		if err := rows.Scan(&s.query, &s.calls, &s.rows, &s.execMs); err != nil {
			return nil, err
		}
		s.tag = tagOf(s.query)
		if strings.HasPrefix(s.tag, "bench:") || s.isRiver() && !withRiver {
			continue
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// countStatements runs fn, counting the statements around it when
// pg_stat_statements can be used; ok says whether it could.
func (b *Bench) countStatements(ctx context.Context, withRiver bool, fn func() error) (stmts stmtList, ok bool, err error) {
	if !b.statementsOK {
		return nil, false, fn()
	}
	stmts, err = b.statementsOf(ctx, withRiver, fn)
	return stmts, err == nil, err
}

// trackStatements turns pg_stat_statements' tracking on for a scenario
// (on the bench's own cluster, where it is off otherwise); the scenario
// calls stop when it is done.
func (b *Bench) trackStatements(ctx context.Context) (stop func(), err error) {
	if !b.statementsOK || b.cluster == nil {
		return func() {}, nil
	}
	if err := b.setTracking(ctx, "top"); err != nil {
		return nil, err
	}
	return func() { _ = b.setTracking(context.Background(), "none") }, nil
}

// stmtGrid lists the first limit statements (all when limit is 0) with
// their tags, calls per perName (per of them in the phase), rows per call
// and mean execution time.
func stmtGrid(caption string, stmts stmtList, per int64, perName string, limit int) Grid {
	g := Grid{Caption: caption, Header: []string{"tag", "statement", "calls", perName, "rows/call", "mean ms"}}
	for i, s := range stmts {
		if i == limit && limit > 0 {
			break
		}
		g.Rows = append(g.Rows, []string{"`" + s.tag + "`", "`" + shortSQL(s.query) + "`", fmtInt(s.calls),
			fmt.Sprintf("%.2f", float64(s.calls)/float64(max(per, 1))),
			fmt.Sprintf("%.1f", float64(s.rows)/float64(max(s.calls, 1))),
			fmt.Sprintf("%.3f", s.execMs/float64(max(s.calls, 1)))})
	}
	return g
}

var spaces = regexp.MustCompile(`\s+`)

// shortSQL collapses a statement to one line of at most 110 characters,
// without its tag comment (the grids show the tag on its own), safe inside
// a markdown table cell and a code span.
func shortSQL(q string) string {
	q = statementTag.ReplaceAllString(q, "")
	q = strings.TrimSpace(spaces.ReplaceAllString(q, " "))
	if r := []rune(q); len(r) > 110 {
		q = string(r[:107]) + "..."
	}
	q = strings.ReplaceAll(q, "|", "\\|")
	return strings.ReplaceAll(q, "`", "'")
}
