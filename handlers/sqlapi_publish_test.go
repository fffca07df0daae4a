package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/push"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
)

// The SQL API's publish against REST's (API.md § SQL API): the same
// events published both ways, into twin topics with twin subscriptions,
// must give the same results, the same logs and the same deliveries; the
// same bad input, the same error.

// sqlDB opens a pool on the server's database for the application's side.
func sqlDB(t testing.TB, databaseURL string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), databaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// sqlPublishBatch calls ferry.publish_batch(topic, events) on db.
func sqlPublishBatch(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, topic string, events any) ([]client.Published, error) {
	raw, err := json.Marshal(events)
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `SELECT id, partition, duplicate FROM ferry.publish_batch($1, $2::jsonb)`, topic, string(raw))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (client.Published, error) {
		var p client.Published
		err := row.Scan(&p.ID, &p.Partition, &p.Duplicate)
		return p, err
	})
}

// sqlProblem is a SQL API error as REST's problem: status from SQLSTATE
// FR<status>, code and detail from "ferry: <code>: <detail>".
func sqlProblem(t testing.TB, err error) (int, string, string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "a database error, not %v", err)
	require.True(t, strings.HasPrefix(pgErr.Code, "FR"), "SQLSTATE %s: %s", pgErr.Code, pgErr.Message)
	var status int
	_, scanErr := fmt.Sscanf(pgErr.Code, "FR%d", &status)
	require.NoError(t, scanErr)
	rest, ok := strings.CutPrefix(pgErr.Message, "ferry: ")
	require.True(t, ok, "message %q", pgErr.Message)
	code, detail, ok := strings.Cut(rest, ": ")
	require.True(t, ok, "message %q", pgErr.Message)
	return status, code, detail
}

var indexRe = regexp.MustCompile(`\[\d+\]`)

// pendingDrained waits until the relay has appended every pending event.
func pendingDrained(t testing.TB, db *pgxpool.Pool) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		err := db.QueryRow(context.Background(), `SELECT count(*) FROM ferry.event_pending`).Scan(&n)
		return err == nil && n == 0
	}, 10*time.Second, time.Millisecond, "the relay appended the pending events")
}

// Every kind of bad input REST refuses, SQL refuses alike: SQLSTATE
// FR<status> with "ferry: <code>: <detail>", the detail REST's; and
// nothing is written either way.
func TestSQLPublishErrorsAsREST(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	db := sqlDB(t, env.DatabaseURL)
	putTopic(t, env, "errs", map[string]any{"partitions": 2}, http.StatusCreated)
	long := strings.Repeat("x", 257)
	many := make([]map[string]any, 1001)
	for i := range many {
		many[i] = evt("t")
	}
	big := map[string]any{"s": strings.Repeat("x", 262144)}
	cases := []struct {
		name   string
		topic  string
		events any
	}{
		{"no events", "errs", nil},
		{"events not an array", "errs", map[string]any{}},
		{"empty", "errs", []any{}},
		{"over the batch limit", "errs", many},
		{"event not an object", "errs", []any{5}},
		{"type missing", "errs", []any{map[string]any{"data": 1}}},
		{"type null", "errs", []any{map[string]any{"type": nil}}},
		{"type empty", "errs", []any{evt("")}},
		{"type too long", "errs", []any{evt(long)}},
		{"type a number", "errs", []any{map[string]any{"type": 5}}},
		{"id empty", "errs", []any{evt("t", "id", "")}},
		{"key too long", "errs", []any{evt("t", "key", long)}},
		{"key an object", "errs", []any{evt("t", "key", map[string]any{})}},
		{"two mistakes", "errs", []any{evt("t"), evt("", "id", "")}},
		{"unknown field", "errs", []any{evt("t", "offset", 3)}},
		{"attributes an array", "errs", []any{evt("t", "attributes", []any{})}},
		{"attribute a number", "errs", []any{evt("t", "attributes", map[string]any{"n": 1})}},
		{"attribute key empty", "errs", []any{evt("t", "attributes", map[string]any{"": "v"})}},
		{"attribute value too long", "errs", []any{evt("t", "attributes", map[string]any{"k": strings.Repeat("v", 4097)})}},
		{"bad traceparent", "errs", []any{evt("t", "attributes", map[string]any{"traceparent": "00-abc"})}},
		{"data too large", "errs", []any{evt("t"), evt("t", "data", big)}},
		{"unknown topic", "nope", []any{evt("t")}},
		{"bad topic name", "no/pe", []any{evt("t")}},
	}
	t.Run("REST and SQL", func(t *testing.T) { // returns when every case has run
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				env := forTest(env, t)
				body := map[string]any{}
				if c.events != nil {
					body["events"] = c.events
				}
				path := tpath(c.topic, "/events")
				if c.topic == "no/pe" {
					path = "/v1/topics/no%2Fpe/events"
				}
				r := env.Do("POST", path, body)
				require.GreaterOrEqual(t, r.Status, 400, "REST: %s", r.Body)
				var p map[string]any
				require.NoError(t, json.Unmarshal(r.Body, &p))
				_, err := sqlPublishBatch(context.Background(), db, c.topic, c.events)
				require.Error(t, err)
				status, code, detail := sqlProblem(t, err)
				if strings.Contains(detail, ": must be a") && !strings.Contains(p["detail"].(string), "[") {
					// A JSON type mistake: REST's decoder names the member
					// without the event's index, SQL with it.
					detail = indexRe.ReplaceAllString(detail, "")
				}
				require.Equal(t, []any{float64(r.Status), p["code"], p["detail"]}, []any{float64(status), code, detail}, "REST %s", r.Body)
			})
		}
	})
	// ferry.publish names the fields of its arguments without an index.
	single := []struct {
		typ, options, want string
		status             int
	}{
		{"t", `{"dedup_id": "x"}`, "dedup_id: unknown field (member names are case-sensitive)", 400},
		{"t", `{"type": "x"}`, "type: unknown field (member names are case-sensitive)", 400},
		{"t", `[]`, "options: must be an object, not array", 400},
		{"", `{}`, "type: must be 1-256 bytes of text", 400},
		{"t", `{"id": 5}`, "id: must be a string, not number", 400},
		{"t", `{"key": ""}`, "key: must be 1-256 bytes of text", 400},
		{"t", `{"attributes": {"traceparent": "x"}}`, "attributes.traceparent: must be a W3C trace context traceparent: 00-<32 hex>-<16 hex>-<2 hex>, lowercase, ids not all zeros", 400},
	}
	for _, c := range single {
		_, err := db.Exec(context.Background(), `SELECT ferry.publish('errs', $1, NULL, $2::jsonb)`, c.typ, c.options)
		status, code, detail := sqlProblem(t, err)
		require.Equal(t, []any{c.status, c.want}, []any{status, detail}, "ferry.publish options %s", c.options)
		require.Equal(t, "invalid_request", code)
	}
	_, err := db.Exec(context.Background(), `SELECT ferry.publish('errs', NULL, '{}')`)
	_, _, detail := sqlProblem(t, err)
	require.Equal(t, "type: is required", detail)
	_, err = db.Exec(context.Background(), `SELECT ferry.publish('errs', 't', $1::jsonb)`, `{"s": "`+strings.Repeat("x", 262144)+`"}`)
	status, _, detail := sqlProblem(t, err)
	require.Equal(t, 413, status)
	require.Equal(t, "event: data and attributes are 262152 bytes; the limit is 262144", detail)
	t.Run("nothing written", func(t *testing.T) {
		var n int
		require.NoError(t, db.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM ferry.event_pending) + (SELECT count(*) FROM ferry.events) + (SELECT count(*) FROM ferry.event_dedup)`).Scan(&n))
		require.Zero(t, n)
	})
}

// publishCase is one case of the dual-path test: a topic's partitions and
// subscriptions, and the publishes made to it, each a batch (through SQL
// one transaction; a batch of one through ferry.publish).
type publishCase struct {
	name       string
	partitions int
	subs       map[string]map[string]any
	batches    [][]map[string]any
}

// normalEvent is an event without what legitimately differs between the
// twins: a generated id (shown as "gen"), and a keyless event's partition
// and offset (spread differently).
func normalEvent(ev client.Event, given map[string]bool) string {
	id := ev.ID
	if !given[id] {
		id = "gen"
	}
	attrs, _ := json.Marshal(ev.Attributes)
	place := ""
	if ev.Key != nil {
		place = fmt.Sprintf(" p%d", ev.Partition)
	}
	var data any
	_ = json.Unmarshal(ev.Data, &data)
	d, _ := json.Marshal(data)
	return fmt.Sprintf("%s %s key=%v data=%s attrs=%s%s", id, ev.Type, deref(ev.Key), d, attrs, place)
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// publishTwin publishes the case's batches to topic through REST (sql
// false) or SQL, and returns each event's result, normalized.
func publishTwin(t *testing.T, env *ferrytest.Env, db *pgxpool.Pool, topic string, c publishCase, sql bool, given map[string]bool) []string {
	ctx := context.Background()
	var out []string
	first := map[string]int{}
	for _, batch := range c.batches {
		var res []client.Published
		switch {
		case !sql:
			res = publishRaw(t, env, topic, batch...)
		case len(batch) == 1:
			e := batch[0]
			opts := map[string]any{}
			for _, k := range []string{"id", "key", "attributes"} {
				if v, ok := e[k]; ok {
					opts[k] = v
				}
			}
			data, _ := json.Marshal(e["data"])
			o, _ := json.Marshal(opts)
			var r client.Published
			require.NoError(t, db.QueryRow(ctx, `SELECT id, partition, duplicate FROM ferry.publish($1, $2, $3::jsonb, $4::jsonb)`,
				topic, e["type"], string(data), string(o)).Scan(&r.ID, &r.Partition, &r.Duplicate))
			res = []client.Published{r}
		default:
			var err error
			res, err = sqlPublishBatch(ctx, db, topic, batch)
			require.NoError(t, err)
		}
		require.Len(t, res, len(batch))
		for i, r := range res {
			id := r.ID
			if !given[id] {
				id = "gen"
			} else if f, ok := first[id]; ok {
				require.True(t, r.Duplicate, "%s repeated", id)
				require.Equal(t, f, r.Partition, "a duplicate answers the original's partition")
			} else {
				first[id] = r.Partition
			}
			place := ""
			if _, keyed := batch[i]["key"]; keyed && !r.Duplicate {
				place = fmt.Sprintf(" p%d", r.Partition)
			}
			out = append(out, fmt.Sprintf("%s dup=%v%s", id, r.Duplicate, place))
		}
	}
	return out
}

// drainTwin receives (and acks) every delivery of the subscription until
// none is left, and returns what was received, normalized and sorted: for
// an ordered subscription, what each receive got (the heads of the keys,
// fewer than a receive's 100 in these cases); for another, all of it in
// one round (which 100 of more a receive takes is not defined).
func drainTwin(t *testing.T, env *ferrytest.Env, topic, sub string, ordered bool, given map[string]bool) [][]string {
	var rounds [][]string
	for {
		got := receiveAll(t, env, topic, sub)
		if len(got) == 0 {
			if !ordered && len(rounds) > 1 {
				all := slices.Concat(rounds...)
				sort.Strings(all)
				rounds = [][]string{all}
			}
			return rounds
		}
		var round, receipts []string
		for _, m := range got {
			round = append(round, normalEvent(m.Event, given))
			receipts = append(receipts, m.Receipt)
		}
		sort.Strings(round)
		rounds = append(rounds, round)
		ackSub(t, env, topic, sub, receipts...)
	}
}

// The dual-path test (issue 11, item 3): every case published through
// REST and through SQL into twin topics with twin subscriptions gives the
// same results (duplicates, keyed partitions), the same log (each keyed
// partition's events in the same order) and the same deliveries to every
// subscription: filters on types, attributes and data, ordered keys
// delivered one at a time in the same order, duplicates delivered once.
func TestSQLPublishDualPath(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	db := sqlDB(t, env.DatabaseURL)
	filters := map[string]map[string]any{
		"all":            nil,
		"one-word":       {"filter": map[string]any{"types": []any{"order.*"}}},
		"any-word":       {"filter": map[string]any{"types": []any{"order.#"}}},
		"eu":             {"filter": map[string]any{"attributes": map[string]any{"region": []any{"eu"}}}},
		"gold":           {"filter": map[string]any{"data": map[string]any{"customer.tier": []any{"gold"}}}},
		"both":           {"filter": map[string]any{"types": []any{"order.#"}, "attributes": map[string]any{"region": []any{"us", "eu"}}}},
		"ordered":        {"ordered": true},
		"ordered-orders": {"ordered": true, "filter": map[string]any{"types": []any{"order.*"}}},
	}
	n := 0
	e := func(typ string, kv ...any) map[string]any {
		n++
		return evt(typ, append([]any{"data", map[string]any{"n": n}}, kv...)...)
	}
	gold := func(tier string) map[string]any { return map[string]any{"customer": map[string]any{"tier": tier}} }
	cases := []publishCase{
		{name: "filters", partitions: 3, subs: filters, batches: [][]map[string]any{
			{e("order.created", "attributes", map[string]any{"region": "eu"}), e("order.item.added"), e("orders.created")},
			{e("order"), e("order.paid", "attributes", map[string]any{"region": "us"})},
			{evt("order.created", "data", gold("gold")), evt("audit.seen", "data", gold("silver"))},
			{evt("user.seen", "data", gold("gold"), "attributes", map[string]any{"region": "eu"})},
		}},
		{name: "ordered keys", partitions: 2, subs: filters, batches: [][]map[string]any{
			{e("order.created", "key", "k1", "id", "o1"), e("order.created", "key", "k2", "id", "o2"), e("order.paid", "key", "k1", "id", "o3")},
			{e("order.shipped", "key", "k1", "id", "o4")},
			{e("order.created", "id", "o5"), e("order.paid", "key", "k2", "id", "o6"), e("audit.seen", "key", "k1", "id", "o7")},
			{e("order.closed", "key", "ключ-é", "id", "o8"), e("order.closed", "key", "ключ-é", "id", "o9")},
		}},
		{name: "dedup", partitions: 4, subs: map[string]map[string]any{"all": nil, "ordered": {"ordered": true}}, batches: [][]map[string]any{
			{e("t", "id", "d1", "key", "a"), e("t", "id", "d2"), e("t", "id", "d1", "key", "b")},
			{e("t", "id", "d2", "key", "c")},
			{e("t", "id", "d3", "key", "a"), e("t", "id", "d1"), e("t", "id", "d3")},
		}},
		{name: "data and attributes", partitions: 1, subs: map[string]map[string]any{"all": nil}, batches: [][]map[string]any{
			{evt("t", "id", "n1"), evt("t", "id", "n2", "data", nil), evt("t", "id", "n3", "data", []any{1, 2.5, "é", nil, true})},
			{evt("t", "id", "n4", "attributes", map[string]any{}), evt("t", "id", "n5", "data", "text", "attributes", map[string]any{"a": "", "traceparent": traceparent})},
			{evt("t", "id", "n6", "data", 1e300)},
		}},
		{name: "many keys", partitions: 8, subs: map[string]map[string]any{"all": nil}, batches: [][]map[string]any{
			manyKeyed(0, 60), manyKeyed(60, 40), {e("t", "key", "k-7")},
		}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env := forTest(env, t)
			given := map[string]bool{}
			for _, b := range c.batches {
				for _, ev := range b {
					if id, ok := ev["id"].(string); ok {
						given[id] = true
					}
				}
			}
			twins := [2]string{fmt.Sprintf("rest-%d", i), fmt.Sprintf("sql-%d", i)}
			for _, tp := range twins {
				putTopic(t, env, tp, map[string]any{"partitions": c.partitions}, http.StatusCreated)
				for name, cfg := range c.subs {
					putSub(t, env, tp, name, cfg, http.StatusCreated)
				}
			}
			restRes := publishTwin(t, env, db, twins[0], c, false, given)
			sqlRes := publishTwin(t, env, db, twins[1], c, true, given)
			require.Equal(t, restRes, sqlRes, "results")
			pendingDrained(t, db)
			var logs [2][]string
			for k, tp := range twins {
				evs := logEvents(t, env, tp)
				byPlace := map[string][]client.Event{}
				for _, ev := range evs {
					byPlace[fmt.Sprint(ev.Key != nil, ev.Partition)] = append(byPlace[fmt.Sprint(ev.Key != nil, ev.Partition)], ev)
				}
				for _, part := range byPlace {
					slices.SortFunc(part, func(a, b client.Event) int { return int(a.Offset - b.Offset) })
					for _, ev := range part {
						logs[k] = append(logs[k], normalEvent(ev, given))
					}
				}
				sort.Strings(logs[k])
				for p := range c.partitions {
					page := readEvents(t, env, tp, fmt.Sprintf("?partition=%d&limit=1000", p))
					for j, ev := range page.Events {
						require.Equal(t, int64(j), ev.Offset, "%s partition %d dense", tp, p)
					}
				}
			}
			require.Equal(t, logs[0], logs[1], "logs")
			keyedOrder := func(tp string) []string {
				var out []string
				for p := range c.partitions {
					for _, ev := range readEvents(t, env, tp, fmt.Sprintf("?partition=%d&limit=1000", p)).Events {
						if ev.Key != nil {
							out = append(out, normalEvent(ev, given))
						}
					}
				}
				return out
			}
			require.Equal(t, keyedOrder(twins[0]), keyedOrder(twins[1]), "keyed events in the same order")
			for name, cfg := range c.subs {
				ordered := cfg["ordered"] == true
				require.Equal(t, drainTwin(t, env, twins[0], name, ordered, given), drainTwin(t, env, twins[1], name, ordered, given),
					"deliveries of %s", name)
			}
		})
	}
}

func manyKeyed(from, n int) []map[string]any {
	out := make([]map[string]any, n)
	for i := range out {
		out[i] = evt("t", "id", fmt.Sprintf("m%d", from+i), "key", fmt.Sprintf("k-%d", (from+i)%13), "data", map[string]any{"n": from + i})
	}
	return out
}

// A committed SQL publish wakes long polls (the server's fallback poll is
// 30 s): a GET .../events long poll and a subscription's receive long
// poll, each seen parked before the commit, answer with the event soon
// after it, so only the wake explains their answer. (How soon is make
// bench's to measure.) Push delivery of a SQL publish is in
// TestSQLPublishPush.
func TestSQLPublishWakesLongPolls(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	env := ferrytest.StartOn(t, withAppName(t, dbURL, "ferry-lp"), withPoll(30*time.Second))
	db := sqlDB(t, dbURL)
	putTopic(t, env, "lp", map[string]any{"partitions": 1}, http.StatusCreated)
	putSub(t, env, "lp", "s", nil, http.StatusCreated)
	var logLat, subLat []time.Duration
	parked := map[bool]int{}
	for i := range 10 {
		for _, viaSub := range []bool{false, true} {
			before := env.Server.LongPollsParked()
			type answer struct {
				ids, receipts []string
				at            time.Time
			}
			got := make(chan answer, 1)
			go func() {
				var ids, receipts []string
				if viaSub {
					r := env.Do("POST", spath("lp", "s", "/receive"), map[string]any{"wait_seconds": 10, "max_messages": 10})
					for _, m := range decodeSubMessages(t, r.Body) {
						ids = append(ids, m.ID)
						receipts = append(receipts, m.Receipt)
					}
				} else {
					r := env.Do("GET", tpath("lp", fmt.Sprintf("/events?partition=0&from_offset=%d&wait_seconds=10", 2*i+btoi(viaSub))), nil)
					var page client.EventPage
					r.JSON(t, &page)
					for _, e := range page.Events {
						ids = append(ids, e.ID)
					}
				}
				got <- answer{ids, receipts, time.Now()}
			}()
			if parkedWithin(env, before, 10*time.Second) {
				parked[viaSub]++
			}
			id := fmt.Sprintf("e-%d-%v", i, viaSub)
			tx, err := db.Begin(context.Background())
			require.NoError(t, err)
			_, err = sqlPublishBatch(context.Background(), tx, "lp", []any{evt("t", "id", id)})
			require.NoError(t, err)
			require.NoError(t, tx.Commit(context.Background()))
			committed := time.Now()
			a := <-got
			require.Equal(t, []string{id}, a.ids)
			if viaSub {
				subLat = append(subLat, a.at.Sub(committed))
				ackSub(t, env, "lp", "s", a.receipts...)
				continue
			}
			logLat = append(logLat, a.at.Sub(committed))
			// The subscription's delivery of it, appended with it: acked,
			// so that the next receive waits.
			ms := receiveAll(t, env, "lp", "s")
			require.Len(t, ms, 1)
			ackSub(t, env, "lp", "s", ms[0].Receipt)
		}
	}
	t.Logf("long polls seen parked before the commit: %d of 10 GET events, %d of 10 receives", parked[false], parked[true])
	require.Equal(t, 10, parked[false], "GET events long polls seen parked")
	require.Equal(t, 10, parked[true], "receive long polls seen parked")
	for what, lat := range map[string][]time.Duration{"GET events": logLat, "subscription receive": subLat} {
		slices.Sort(lat)
		t.Logf("SQL commit → %s long poll answered: p50 %v, max %v (%d)", what, lat[len(lat)/2], lat[len(lat)-1], len(lat))
		// Woken by the commit's NOTIFY: the server polls only every 30 s.
		// (The latency target, p50 < 50 ms, is make bench's to measure:
		// scenario 13; a loaded CI machine once saw a p50 of 83 ms.)
		require.Less(t, lat[len(lat)-1], 5*time.Second, what)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Push delivery of a SQL publish: a push subscription's endpoint gets the
// event, signed, within milliseconds of the commit (p50 < 50 ms), once.
func TestSQLPublishPush(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, allowPrivatePush, withPoll(30*time.Second))
	db := sqlDB(t, env.DatabaseURL)
	rc := newReceiver(t, nil)
	putTopic(t, env, "pushed", map[string]any{"partitions": 2}, http.StatusCreated)
	secret := newPushSub(t, env, "pushed", "hook", fast(map[string]any{"push": map[string]any{"url": rc.url()}}))
	var lat []time.Duration
	for i := range 10 {
		id := fmt.Sprintf("p-%d", i)
		tx, err := db.Begin(context.Background())
		require.NoError(t, err)
		_, err = tx.Exec(context.Background(), `SELECT ferry.publish('pushed', 'order.created', $1::jsonb, $2::jsonb)`,
			fmt.Sprintf(`{"n": %d}`, i), fmt.Sprintf(`{"id": %q, "key": "k"}`, id))
		require.NoError(t, err)
		require.NoError(t, tx.Commit(context.Background()))
		committed := time.Now()
		h := rc.wait(t, i+1)[i]
		lat = append(lat, h.at.Sub(committed))
		require.Equal(t, id, h.id())
		require.NoError(t, push.Verify(secret, h.header, h.body, time.Now(), 0))
		var ev client.Event
		require.NoError(t, json.Unmarshal(h.body, &ev))
		require.JSONEq(t, fmt.Sprintf(`{"n": %d}`, i), string(ev.Data))
		require.Equal(t, int64(i), ev.Offset)
	}
	waitDrained(t, env, "pushed", "hook")
	require.Equal(t, 10, rc.count(), "each event pushed once")
	slices.Sort(lat)
	t.Logf("SQL commit → push request at the endpoint: p50 %v, max %v", lat[len(lat)/2], lat[len(lat)-1])
	// Woken by the commit's NOTIFY: an idle push worker also looks every
	// 250 ms, which alone would make the median about 125 ms. (The
	// latency target, p50 < 50 ms, is make bench's to measure; a loaded
	// machine saw a p50 of 48 ms here.)
	require.Less(t, lat[len(lat)/2], 100*time.Millisecond)
}

// A REST publish of an id that a committed SQL publish claimed, while the
// relay has not appended it yet (here: the test holds the topic's relay
// lock), is a duplicate that waits for the append and then answers the
// original's partition and offset; if the append does not come within 5 s
// it is a 503 to retry, and its other events are published.
func TestSQLPublishPendingDuplicateOverREST(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	env := ferrytest.StartOn(t, withAppName(t, dbURL, "ferry-pend"))
	db := sqlDB(t, dbURL)
	ctx := context.Background()
	putTopic(t, env, "pend", map[string]any{"partitions": 2}, http.StatusCreated)
	var topicID int64
	require.NoError(t, db.QueryRow(ctx, `SELECT id FROM ferry.topics WHERE name = 'pend'`).Scan(&topicID))
	holdRelay := func() pgx.Tx {
		tx, err := db.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		_, err = tx.Exec(ctx, `SELECT pg_advisory_xact_lock(1718772334, $1::integer)`, topicID)
		require.NoError(t, err)
		return tx
	}

	hold := holdRelay()
	sqlRes, err := sqlPublishBatch(ctx, db, "pend", []any{evt("t", "id", "x", "key", "kx")})
	require.NoError(t, err)
	before := env.Server.LongPollsParked()
	answered := make(chan ferrytest.Response, 1)
	go func() {
		answered <- env.Do("POST", tpath("pend", "/events"), map[string]any{"events": []any{evt("t", "id", "x")}})
	}()
	// Seen waiting for the append, most times (see
	// TestSQLPublishWakesLongPolls); if not, it finds it appended.
	t.Logf("REST publish seen waiting for the relay: %v",
		parkedWithin(env, before, 2*time.Second))
	require.NoError(t, hold.Rollback(ctx))
	_, err = sqlPublishBatch(ctx, db, "pend", []any{evt("t", "id", "wake", "key", "kx")}) // its NOTIFY wakes the relay
	require.NoError(t, err)
	r := <-answered
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var out struct {
		Events []client.Published `json:"events"`
	}
	r.JSON(t, &out)
	require.Equal(t, []client.Published{{ID: "x", Partition: sqlRes[0].Partition, Offset: 0, Duplicate: true}}, out.Events)

	hold = holdRelay()
	_, err = sqlPublishBatch(ctx, db, "pend", []any{evt("t", "id", "y")})
	require.NoError(t, err)
	start := time.Now()
	r = env.Do("POST", tpath("pend", "/events"), map[string]any{"events": []any{evt("t", "id", "fresh"), evt("t", "id", "y")}})
	requireProblem(t, r, http.StatusServiceUnavailable, "unavailable")
	require.Equal(t, "1", r.Header.Get("Retry-After"))
	require.GreaterOrEqual(t, time.Since(start), 5*time.Second)
	require.NoError(t, hold.Rollback(ctx))
	_, err = sqlPublishBatch(ctx, db, "pend", []any{evt("t", "id", "wake-2")})
	require.NoError(t, err)
	pendingDrained(t, db)
	again := publishEvents(t, env, "pend", evt("t", "id", "fresh"), evt("t", "id", "y"))
	require.True(t, again[0].Duplicate && again[1].Duplicate, "both were published: %+v", again)
	require.Len(t, logEvents(t, env, "pend"), 5) // x, wake, y, fresh, wake-2
}

// Two instances relay one database at once: SQL publishes committed while
// both run are each appended once, offsets dense, each transaction's
// events in call order. Events committed while no instance runs wait,
// pending, for the next start, which appends them.
func TestSQLPublishTwoInstancesAndRestart(t *testing.T) {
	t.Parallel()
	a := ferrytest.Start(t)
	b := ferrytest.StartOn(t, a.DatabaseURL)
	db := sqlDB(t, a.DatabaseURL)
	ctx := context.Background()
	putTopic(t, a, "two", map[string]any{"partitions": 2}, http.StatusCreated)
	var txs [][]string
	for k := range 40 {
		tx, err := db.Begin(ctx)
		require.NoError(t, err)
		var ids []string
		for j := range 1 + k%3 {
			id := fmt.Sprintf("t%d-e%d", k, j)
			ids = append(ids, id)
			_, err = tx.Exec(ctx, `SELECT ferry.publish('two', 't', NULL, $1::jsonb)`, fmt.Sprintf(`{"id": %q, "key": "k%d"}`, id, k%2))
			require.NoError(t, err)
		}
		require.NoError(t, tx.Commit(ctx))
		txs = append(txs, ids)
	}
	pendingDrained(t, db)
	requireLogOnce(t, b, "two", txs)

	a.Stop()
	b.Stop()
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	_, err = sqlPublishBatch(ctx, tx, "two", []any{evt("t", "id", "late-1", "key", "k0"), evt("t", "id", "late-2", "key", "k0")})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	var pending int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM ferry.event_pending`).Scan(&pending))
	require.Equal(t, 2, pending, "no instance runs")
	c := ferrytest.StartOn(t, a.DatabaseURL)
	pendingDrained(t, db)
	requireLogOnce(t, c, "two", append(txs, []string{"late-1", "late-2"}))
}

// requireLogOnce checks that the topic's log holds exactly the events of
// txs, each once, with dense offsets, and each transaction's events (all
// of one key) in call order.
func requireLogOnce(t testing.TB, env *ferrytest.Env, topic string, txs [][]string) {
	t.Helper()
	at := map[string]int64{}
	for p := range getTopic(t, env, topic).Partitions {
		for i, e := range readEvents(t, env, topic, fmt.Sprintf("?partition=%d&limit=1000", p)).Events {
			require.Equal(t, int64(i), e.Offset, "dense")
			require.NotContains(t, at, e.ID, "appended once")
			at[e.ID] = e.Offset
		}
	}
	n := 0
	for _, ids := range txs {
		n += len(ids)
		for i := 1; i < len(ids); i++ {
			require.Less(t, at[ids[i-1]], at[ids[i]], "call order %v", ids)
		}
	}
	require.Len(t, at, n)
}
