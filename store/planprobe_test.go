package store_test

// The plan probe: a pool whose every statement, nested ones included
// (trigger bodies, SQL functions), reports its executed plan to the test,
// so a test can assert that a hot statement did work proportional to its
// batch (DESIGN.md invariant 11) whatever plan PostgreSQL chose.
//
// Each connection loads auto_explain with log_analyze and buffers, in JSON,
// at NOTICE level: PostgreSQL sends every plan to the client as a notice,
// and the pool's OnNotice hands it to the probe. The tests then call the
// real store functions through the probe's pool: no statement is copied
// into a test, so a regression in the store fails here by the statement's
// tag (its /* ferry:name */ comment) or, untagged, its first line.
//
// The histories that made plans walk whole queues in production are
// planHistories: a queue that is new in an analyzed table, generic plans
// cached while the tables were empty, and tables that were never analyzed.
// Autovacuum is off for the test's database throughout, so no ANALYZE
// comes along to rescue a bad estimate or invalidate a cached plan.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
	"github.com/ferry-mq/ferry/store"
)

// planHistory is how the database came to be as a test finds it, which is
// what decides the planner's estimates and the plans pooled connections
// hold.
type planHistory struct {
	name string
	// genericPlans makes the probe's sessions use generic plans
	// (plan_cache_mode = force_generic_plan), as a pooled connection does
	// after five executions of a prepared statement.
	genericPlans bool
	// analyzeBefore runs ANALYZE on every table after the warm-up fixture
	// (other, older queues and topics with data) and before the tested
	// queue or topic is created and filled: the planner then believes the
	// new queue_id has about no rows.
	analyzeBefore bool
	// warmOnEmpty runs the case once, through the probe, before the backlog
	// is built: every statement is prepared and, with genericPlans, its
	// generic plan is made while the tables are empty, then kept.
	warmOnEmpty bool
}

// planHistories are the histories every plan case runs under, except
// that runPlanCasesNotOnAnalyzedEmpty leaves out the last.
var planHistories = []planHistory{
	{name: "new_in_analyzed_table", analyzeBefore: true},
	{name: "generic_plan_from_empty_tables", genericPlans: true, warmOnEmpty: true},
	{name: "never_analyzed", warmOnEmpty: true},
	// Generic plans made after an ANALYZE found the tables (and ring
	// slots) empty: PostgreSQL then trusts "empty" (no 10-page guess as
	// for a table never analyzed), and a join's inner side may be planned
	// as a scan of the whole table, kept once the table fills (store/doc.go,
	// # Plans).
	analyzedEmptyTables,
}

// analyzedEmptyTables is planHistories' last.
var analyzedEmptyTables = planHistory{
	name: "generic_plan_from_analyzed_empty_tables", analyzeBefore: true, genericPlans: true, warmOnEmpty: true,
}

// plannedStatement is one executed statement as auto_explain reported it.
type plannedStatement struct {
	Query string
	Plan  planNode
}

// planNode is the part of an EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) node
// the probe reads.
type planNode struct {
	NodeType            string     `json:"Node Type"`
	RelationName        string     `json:"Relation Name"`
	IndexName           string     `json:"Index Name"`
	IndexCond           string     `json:"Index Cond,omitempty"`
	TIDCond             string     `json:"TID Cond,omitempty"`
	Filter              string     `json:"Filter,omitempty"`
	ActualRows          float64    `json:"Actual Rows"`
	ActualLoops         float64    `json:"Actual Loops"`
	RemovedByFilter     float64    `json:"Rows Removed by Filter"`
	RemovedByJoinFilter float64    `json:"Rows Removed by Join Filter"`
	RemovedByRecheck    float64    `json:"Rows Removed by Index Recheck"`
	SharedHit           float64    `json:"Shared Hit Blocks"`
	SharedRead          float64    `json:"Shared Read Blocks"`
	Plans               []planNode `json:"Plans"`
}

// rowsTouched is how many rows the node produced or looked at and threw
// away, over all its loops.
func (n planNode) rowsTouched() float64 {
	loops := max(n.ActualLoops, 1)
	return (n.ActualRows + n.RemovedByFilter + n.RemovedByJoinFilter + n.RemovedByRecheck) * loops
}

// buffers is the shared buffers the node and its children touched (EXPLAIN
// reports them inclusive of children, over all loops).
func (n planNode) buffers() float64 { return n.SharedHit + n.SharedRead }

func (n planNode) describe() string {
	s := n.NodeType
	if n.RelationName != "" {
		s += " on " + n.RelationName
	}
	if n.IndexName != "" {
		s += " using " + n.IndexName
	}
	return s
}

// outline renders the plan one node a line, with what each touched.
func (n planNode) outline(indent string) string {
	s := fmt.Sprintf("%s%s: rows %.0f, buffers %.0f\n", indent, n.describe(), n.rowsTouched(), n.buffers())
	for _, c := range n.Plans {
		s += c.outline(indent + "  ")
	}
	return s
}

// walk calls f for n and every node below it.
func (n planNode) walk(f func(planNode)) {
	f(n)
	for _, c := range n.Plans {
		c.walk(f)
	}
}

// planProbe is a pool on the test's database whose statements report their
// plans.
type planProbe struct {
	t    *testing.T
	Pool *pgxpool.Pool

	mu    sync.Mutex
	plans []plannedStatement
	bad   []string // notices that were not plans, or plans that did not parse
}

// newPlanProbe opens a probe pool on dbURL.
func newPlanProbe(t *testing.T, dbURL string, h planHistory) *planProbe {
	t.Helper()
	p := &planProbe{t: t}
	cfg, err := pgxpool.ParseConfig(dbURL)
	require.NoError(t, err)
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["application_name"] = "ferry-plan-probe"
	cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { p.notice(n) }
	settings := []string{
		`LOAD 'auto_explain'`,
		`SET auto_explain.log_min_duration = 0`,
		`SET auto_explain.log_analyze = on`,
		`SET auto_explain.log_buffers = on`,
		`SET auto_explain.log_timing = off`,
		`SET auto_explain.log_nested_statements = on`,
		`SET auto_explain.log_format = json`,
		`SET auto_explain.log_level = notice`,
		`SET client_min_messages = notice`,
	}
	if h.genericPlans {
		settings = append(settings, `SET plan_cache_mode = force_generic_plan`)
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		for _, s := range settings {
			if _, err := c.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return nil
	}
	p.Pool, err = pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(p.Pool.Close)
	return p
}

// planJSON returns the plan a notice of auto_explain carries, which
// reads "duration: <ms> ms  plan:" and the plan's JSON object (the
// regular expression ^duration: [0-9.]+ ms\s+plan:\s*(\{.*\})\s*$,
// matched by hand: Go's regexp took a third of a second for each plan of
// 100 kB under -race, and a purge or a seek reports hundreds).
func planJSON(msg string) (string, bool) {
	const space = " \t\n\f\r" // RE2's \s
	rest, ok := strings.CutPrefix(msg, "duration: ")
	digits := len(rest) - len(strings.TrimLeft(rest, "0123456789."))
	if !ok || digits == 0 {
		return "", false
	}
	rest, ok = strings.CutPrefix(rest[digits:], " ms")
	spaced := len(rest) - len(strings.TrimLeft(rest, space))
	if !ok || spaced == 0 {
		return "", false
	}
	rest, ok = strings.CutPrefix(rest[spaced:], "plan:")
	rest = strings.Trim(rest, space)
	if !ok || !strings.HasPrefix(rest, "{") || !strings.HasSuffix(rest, "}") {
		return "", false
	}
	return rest, true
}

func (p *planProbe) notice(n *pgconn.Notice) {
	plan, ok := planJSON(n.Message)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !ok {
		p.bad = append(p.bad, n.Message)
		return
	}
	var doc struct {
		Query string   `json:"Query Text"`
		Plan  planNode `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(plan), &doc); err != nil {
		p.bad = append(p.bad, fmt.Sprintf("%v: %s", err, plan))
		return
	}
	p.plans = append(p.plans, plannedStatement{Query: doc.Query, Plan: doc.Plan})
}

// reset forgets the plans seen so far.
func (p *planProbe) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.plans, p.bad = nil, nil
}

// taken returns the plans seen since the last reset and forgets them.
func (p *planProbe) taken() []plannedStatement {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.plans
	p.plans = nil
	require.Empty(p.t, p.bad, "notices the probe could not read")
	return out
}

// statementTag names a statement: its /* ferry:name */ tag, else its first
// non-blank line.
var statementTag = regexp.MustCompile(`/\*\s*(ferry:[a-z0-9_.]+)\s*\*/`)

func statementName(query string) string {
	if m := statementTag.FindStringSubmatch(query); m != nil {
		return m[1]
	}
	for _, line := range strings.Split(query, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			if len(line) > 100 {
				line = line[:100] + "…"
			}
			return line
		}
	}
	return "(empty statement)"
}

// workBound is what a statement of one batch may touch: rows per plan node
// and shared buffers per statement, each a per-item amount (RowsPerItem,
// BuffersPerRow) times the batch plus a constant (RowsFixed, BuffersFixed) for fixed costs (catalog-free lookups of the queue row, index
// descents, trigger bookkeeping).
type workBound struct {
	Batch         int
	RowsPerItem   float64 // default 10
	RowsFixed     float64 // default 200
	BuffersPerRow float64 // default 20
	BuffersFixed  float64 // default 300
	// Seen lists the tags of statements the operation must have run, and
	// the probe checked: a statement nested in another's function (such as
	// ferry:message_promote, called from the statements that remove group
	// heads) must not drop out of the check unnoticed.
	Seen []string
}

func (b workBound) rows() float64 {
	return cmpOr(b.RowsPerItem, 10)*float64(b.Batch) + cmpOr(b.RowsFixed, 200)
}

func (b workBound) buffers() float64 {
	return cmpOr(b.BuffersPerRow, 20)*float64(b.Batch) + cmpOr(b.BuffersFixed, 300)
}

// ringBuffers is buffers() for a statement that reads ferry.messages'
// partitions (store/doc.go, # Held snapshots): a probe by (queue_id, id),
// by a group or by an event's position cannot name the partition, so it
// descends that index in each of the 18 partitions (two or three buffers
// each, the empty ones too) until it finds its row, and a statement that
// removes group heads makes three such probes a row. Six times the
// per-row bound: still proportional to the batch, which is what the
// attacks test (a plan that walks a queue touches its whole backlog).
func (b workBound) ringBuffers() float64 {
	return 6*cmpOr(b.BuffersPerRow, 20)*float64(b.Batch) + cmpOr(b.BuffersFixed, 300)
}

// sqlSendCall matches a call of the SQL API's sends, whose buffers hold
// those of the probes of ferry.messages' partitions they run.
var sqlSendCall = regexp.MustCompile(`\bferry\.send_[a-z_]+\(`)

// ringPartition names a partition of ferry.messages.
var ringPartition = regexp.MustCompile(`^messages_([0-9]{2}|cold|far)$`)

// touchesRing reports whether the plan reads a partition of ferry.messages.
func (n planNode) touchesRing() bool {
	found := false
	n.walk(func(c planNode) {
		if ringPartition.MatchString(c.RelationName) {
			found = true
		}
	})
	return found
}

func cmpOr(v, def float64) float64 {
	if v == 0 {
		return def
	}
	return v
}

// check asserts that every statement run since the last reset (or check)
// stayed within the bound, and returns how many statements it checked. Its
// failure names the operation, the statement and the node that did too
// much, with the whole plan for the reader.
func (p *planProbe) check(op string, b workBound) int {
	p.t.Helper()
	plans := p.taken()
	require.NotEmpty(p.t, plans, "%s: the probe saw no statement (is it running on the probe's pool?)", op)
	seen := map[string]bool{}
	for _, s := range plans {
		seen[statementName(s.Query)] = true
	}
	for _, name := range b.Seen {
		require.True(p.t, seen[name], "%s: the probe saw no statement %s", op, name)
	}
	for _, s := range plans {
		name := statementName(s.Query)
		if os.Getenv("FERRY_PLAN_PROBE_VERBOSE") != "" {
			p.t.Logf("%s: %s:\n%s", op, name, s.Plan.outline(""))
		}
		var worst planNode
		s.Plan.walk(func(n planNode) {
			if n.rowsTouched() > worst.rowsTouched() {
				worst = n
			}
		})
		buffers := s.Plan.buffers()
		if isEngineCall(s) {
			// A call of one of the engine's functions (ferry.message_ack,
			// ferry.receive, ...): its buffers are the sum of its
			// statements' and the function's own first-call lookups, and
			// each of its statements was reported (and is checked) on its
			// own.
			require.Greater(p.t, len(plans), 1, "%s: %s: the probe saw none of the function's statements", op, name)
			buffers = 0
		}
		bound := b.buffers()
		if s.Plan.touchesRing() || sqlSendCall.MatchString(s.Query) {
			bound = b.ringBuffers()
		}
		if worst.rowsTouched() > b.rows() || buffers > bound {
			plan, _ := json.MarshalIndent(s.Plan, "", "  ")
			p.t.Fatalf("%s: statement %s did work out of proportion to its batch of %d:\n"+
				"  node %s touched %.0f rows (bound %.0f); the statement touched %.0f buffers (bound %.0f)\n"+
				"query:\n%s\nplan:\n%s",
				op, name, b.Batch, worst.describe(), worst.rowsTouched(), b.rows(), s.Plan.buffers(), bound,
				s.Query, plan)
		}
	}
	return len(plans)
}

// engineCall matches a statement that calls a function of the claim
// engine or of the SQL API's consumers (store/definitions).
var engineCall = regexp.MustCompile(`\bferry\.(message_[a-z_]+|receive|ack|nack|extend)\(`)

// isEngineCall is whether s only calls such a function: its plan has no
// node but the function call and what handles the rows it returns.
func isEngineCall(s plannedStatement) bool {
	if !engineCall.MatchString(s.Query) {
		return false
	}
	only := true
	s.Plan.walk(func(n planNode) {
		switch n.NodeType {
		case "Function Scan", "Result", "Sort", "Aggregate", "Limit", "Subquery Scan", "ProjectSet":
		default:
			only = false
		}
	})
	return only
}

// planCase is one hot operation under attack, run under every history.
type planCase struct {
	name string
	// setup creates what the case works on (a queue, a topic, ...) on the
	// plain pool. Under analyzeBefore it runs after ANALYZE, so what it
	// creates is new to the planner.
	setup func(t *testing.T, e *env) *planFixture
	// fill builds the backlog the operation must not read, on the plain
	// pool, without ANALYZE.
	fill func(t *testing.T, e *env, f *planFixture)
	// run performs the operation once through db (the probe's pool) and
	// returns the bound its statements must hold. Under warmOnEmpty it also
	// runs on the empty fixture before fill, so it must cope with finding
	// nothing.
	run func(t *testing.T, e *env, f *planFixture, db *pgxpool.Pool) workBound
	// warmUp, when set, adds older data of the case's kind (e.g. an older
	// topic with events and deliveries) to warmUpOtherData's, before
	// ANALYZE under analyzeBefore.
	warmUp func(t *testing.T, e *env)
}

// planFixture is what a case works on; State holds a case's own values
// (receipts, ids) between fill and run.
type planFixture struct {
	Queue store.Queue
	Topic store.Topic
	Sub   store.Subscription
	State map[string]any
}

// runPlanCases runs every case under every history, each in a database of
// its own with autovacuum off.
func runPlanCases(t *testing.T, cases []planCase) {
	runPlanCasesUnder(t, planHistories, cases)
}

// runPlanCasesNotOnAnalyzedEmpty runs every case under every history but
// analyzedEmptyTables. Statements that still fail under it, not yet
// mended (found at definitions generation 13): the event append of a
// publish, the dead-letter list, purge (ten minutes in one run) and
// redrives, the audit list and sweeps, the dead-letter, dedup and event
// expiry, the orphan sweep, the queue stats, the push attempt list, a
// subscription's clear on seek and a topic's content delete. The cases
// that use it: TestPlansQueueDeadLetters, TestPlansQueueSweeps,
// TestPlansAudit, TestPlansTopic, and TestPlansQueueSend's queue_stats.
func runPlanCasesNotOnAnalyzedEmpty(t *testing.T, cases []planCase) {
	var hs []planHistory
	for _, h := range planHistories {
		if h != analyzedEmptyTables {
			hs = append(hs, h)
		}
	}
	runPlanCasesUnder(t, hs, cases)
}

func runPlanCasesUnder(t *testing.T, histories []planHistory, cases []planCase) {
	for _, h := range histories {
		for _, c := range cases {
			t.Run(h.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				runPlanCase(t, h, c)
			})
		}
	}
}

func runPlanCase(t *testing.T, h planHistory, c planCase) {
	var e *env
	if h.analyzeBefore {
		e = newEnvOn(t, pgtest.NewDatabaseFrom(t, analyzedTemplate(t, c.warmUp)))
	} else {
		e = newEnv(t)
		autovacuumOff(t, e)
	}
	probe := newPlanProbe(t, e.dbURL, h)
	f := c.setup(t, e)
	if f.State == nil {
		f.State = map[string]any{}
	}
	if h.warmOnEmpty {
		// Prepare every statement, and with genericPlans let its generic
		// plan be made, while the tables hold nothing.
		for range 6 {
			c.run(t, e, f, probe.Pool)
		}
	}
	c.fill(t, e, f)
	probe.reset()
	b := c.run(t, e, f, probe.Pool)
	require.Positive(t, b.Batch, "the case must give its batch size")
	probe.check(c.name, b)
}

// autovacuumOff turns autovacuum off for every table of e's database.
func autovacuumOff(t *testing.T, e *env) {
	t.Helper()
	_, err := e.pool.Exec(e.ctx, `
		DO $$ DECLARE r record; BEGIN
			-- (A partitioned table has no storage of its own: its partitions are listed.)
			FOR r IN SELECT schemaname, tablename FROM pg_tables t
				WHERE schemaname IN ('ferry', 'public')
					AND (SELECT c.relkind FROM pg_class c WHERE c.oid = format('%I.%I', t.schemaname, t.tablename)::regclass) = 'r' LOOP
				EXECUTE format('ALTER TABLE %I.%I SET (autovacuum_enabled = false)', r.schemaname, r.tablename);
			END LOOP;
		END $$`)
	require.NoError(t, err)
}

// analyzedTemplate is the database every case under analyzeBefore starts
// from, built once per warmUp (per test binary): autovacuum off, the
// older data of warmUpOtherData and warmUp, then ANALYZE. Each case clones
// it (pgtest.NewDatabaseFrom): the same tables, rows and statistics as
// building them in the case's own database, without each case paying for
// them.
func analyzedTemplate(t *testing.T, warmUp func(t *testing.T, e *env)) string {
	t.Helper()
	key := "plans analyzed"
	if warmUp != nil {
		key += " " + runtime.FuncForPC(reflect.ValueOf(warmUp).Pointer()).Name()
	}
	return pgtest.SharedTemplate(t, key, func(dbURL string) error {
		pool, err := pgxpool.New(context.Background(), dbURL)
		if err != nil {
			return err
		}
		defer pool.Close()
		e := &env{t: t, ctx: context.Background(), dbURL: dbURL, db: pool, pool: pool}
		autovacuumOff(t, e)
		warmUpOtherData(t, e)
		if warmUp != nil {
			warmUp(t, e)
		}
		_, err = pool.Exec(e.ctx, `ANALYZE`)
		return err
	})
}

// warmUpOtherData gives the planner statistics made before the tested
// queue existed: an older queue with 50,000 messages, so that ANALYZE
// records a queue_id distribution the new queue is not part of. (Topic
// cases add an older topic through planCase.warmUp.)
func warmUpOtherData(t *testing.T, e *env) {
	t.Helper()
	old := e.queue("older-queue", store.QueuePatch{})
	_, err := e.pool.Exec(e.ctx, `
		INSERT INTO ferry.messages (queue_id, id, visible_at, body)
		SELECT $1, nextval('ferry.message_id_seq'), now(), '{"seq":1}' FROM generate_series(1, 50000)`, old.ID)
	require.NoError(t, err)
}

// fillQueue inserts n available messages into q straight in SQL (as n
// sends would leave them, but fast), ungrouped.
func fillQueue(t *testing.T, e *env, q store.Queue, n int) {
	t.Helper()
	_, err := e.pool.Exec(e.ctx, `
		INSERT INTO ferry.messages (queue_id, id, visible_at, body)
		SELECT $1, nextval('ferry.message_id_seq'), now() - interval '1 second', format('{"seq":%s}', g)::json
		FROM generate_series(1, $2) AS g`, q.ID, n)
	require.NoError(t, err)
}

// planBacklog is the backlog a plan case builds: big enough that reading it
// is far beyond any bound, small enough to build in a fraction of a second.
const planBacklog = 50000

// TestPlanJSON: planJSON reads a notice as the regular expression it
// stands for does.
func TestPlanJSON(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(`(?s)^duration: [0-9.]+ ms\s+plan:\s*(\{.*\})\s*$`)
	for _, msg := range []string{
		"duration: 0.012 ms  plan:\n{\n  \"Query Text\": \"SELECT 1\",\n  \"Plan\": {}\n}",
		"duration: 12 ms\nplan:{\"a\": {\"b\": 1}} \n",
		"duration: 1.5 ms plan: {}",
		"duration: ms  plan:\n{}",
		"duration: 1.5 msplan: {}",
		"duration: 1.5 ms  plan:\n[]",
		"duration: 1.5 ms  plan:\n{} trailing",
		"duration: 1.5 ms  plan:\n{",
		"duration: 1.x ms  plan:\n{}",
		"WARNING: something else",
		"",
	} {
		m := re.FindStringSubmatch(msg)
		got, ok := planJSON(msg)
		require.Equal(t, m != nil, ok, "%q", msg)
		if m != nil {
			require.Equal(t, m[1], got, "%q", msg)
		}
	}
}
