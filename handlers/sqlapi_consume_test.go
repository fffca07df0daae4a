package handlers_test

// The SQL API's consumers (ferry.receive, ferry.ack, ferry.nack,
// ferry.extend; API.md § SQL API) against the REST API: every case runs
// through both and the answers must be the same.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/store"
)

// apiError is a 4xx of either face: REST's problem, or the SQL API's
// SQLSTATE FR<status> with "ferry: <code>: <detail>".
type apiError struct {
	Status int
	Code   string
	Detail string
}

// consumed is a received message as both faces show it (what they share).
type consumed struct {
	ID           string
	Body         any
	Attributes   any
	Group        *string
	DedupID      *string
	Receipt      string
	ReceiveCount int
}

// consumerFace is one face of the consumer API.
type consumerFace interface {
	receive(target string, max, timeout *int) ([]consumed, *apiError)
	// settle acks, nacks or extends; opts are a nack's options or an
	// extend's {"visibility_timeout_seconds": n}.
	settle(action, target string, receipts []string, opts map[string]any) ([]string, *apiError)
}

// restFace is the REST API.
type restFace struct {
	t   testing.TB
	env *ferrytest.Env
}

func targetPath(target string) string {
	if topic, sub, ok := strings.Cut(target, "/"); ok {
		return spath(topic, sub)
	}
	return qpath(target)
}

func restError(t testing.TB, r ferrytest.Response) *apiError {
	t.Helper()
	if r.Status == http.StatusOK {
		return nil
	}
	require.GreaterOrEqual(t, r.Status, 400, "%s", r.Body)
	require.Less(t, r.Status, 500, "%s", r.Body)
	var p struct {
		Status int    `json:"status"`
		Code   string `json:"code"`
		Detail string `json:"detail"`
	}
	r.JSON(t, &p)
	return &apiError{Status: p.Status, Code: p.Code, Detail: p.Detail}
}

func (f restFace) receive(target string, max, timeout *int) ([]consumed, *apiError) {
	body := map[string]any{}
	if max != nil {
		body["max_messages"] = *max
	}
	if timeout != nil {
		body["visibility_timeout_seconds"] = *timeout
	}
	r := f.env.Do("POST", targetPath(target)+"/receive", body)
	if e := restError(f.t, r); e != nil {
		return nil, e
	}
	var out []consumed
	if strings.Contains(target, "/") {
		// The event as the server wrote it (decodeSubMessages checks the
		// shape).
		var raw struct {
			Messages []struct {
				Event any `json:"event"`
			} `json:"messages"`
		}
		r.JSON(f.t, &raw)
		for i, m := range decodeSubMessages(f.t, r.Body) {
			out = append(out, consumed{ID: m.ID, Body: raw.Messages[i].Event, Receipt: m.Receipt, ReceiveCount: m.ReceiveCount})
		}
		return out, nil
	}
	var page struct {
		Messages []struct {
			ID           string          `json:"id"`
			Body         json.RawMessage `json:"body"`
			Attributes   any             `json:"attributes"`
			Group        *string         `json:"group"`
			DedupID      *string         `json:"dedup_id"`
			Receipt      string          `json:"receipt"`
			ReceiveCount int             `json:"receive_count"`
		} `json:"messages"`
	}
	r.JSON(f.t, &page)
	for _, m := range page.Messages {
		var b any
		require.NoError(f.t, json.Unmarshal(m.Body, &b))
		out = append(out, consumed{ID: m.ID, Body: b, Attributes: m.Attributes, Group: m.Group, DedupID: m.DedupID,
			Receipt: m.Receipt, ReceiveCount: m.ReceiveCount})
	}
	return out, nil
}

func (f restFace) settle(action, target string, receipts []string, opts map[string]any) ([]string, *apiError) {
	body := map[string]any{"receipts": receipts}
	for k, v := range opts {
		body[k] = v
	}
	r := f.env.Do("POST", targetPath(target)+"/"+action, body)
	if e := restError(f.t, r); e != nil {
		return nil, e
	}
	var out struct {
		Results []client.ReceiptResult `json:"results"`
	}
	r.JSON(f.t, &out)
	statuses := make([]string, len(out.Results))
	for i, res := range out.Results {
		require.Equal(f.t, receipts[i], res.Receipt, "results in request order")
		statuses[i] = res.Status
	}
	return statuses, nil
}

// sqlFace is the SQL API, each call in a transaction of its own.
type sqlFace struct {
	t  testing.TB
	db *pgxpool.Pool
}

// sqlError turns an FR SQLSTATE into the REST answer it stands for; any
// other error fails the test.
func sqlError(t testing.TB, err error) *apiError {
	t.Helper()
	if err == nil {
		return nil
	}
	var pg *pgconn.PgError
	require.True(t, errors.As(err, &pg), "an error of the SQL API: %v", err)
	require.True(t, strings.HasPrefix(pg.Code, "FR"), "SQLSTATE FR<status>, not %s: %s", pg.Code, pg.Message)
	status, err := strconv.Atoi(pg.Code[2:])
	require.NoError(t, err)
	rest, ok := strings.CutPrefix(pg.Message, "ferry: ")
	require.True(t, ok, "message %q", pg.Message)
	code, detail, ok := strings.Cut(rest, ": ")
	require.True(t, ok, "message %q", pg.Message)
	return &apiError{Status: status, Code: code, Detail: detail}
}

func (f sqlFace) receive(target string, max, timeout *int) ([]consumed, *apiError) {
	ctx := context.Background()
	rows, err := f.db.Query(ctx, `SELECT id, body, attributes, "group", dedup_id, receipt, receive_count, sent_at
		FROM ferry.receive($1, $2, $3)`, target, max, timeout)
	require.NoError(f.t, err)
	defer rows.Close()
	var out []consumed
	for rows.Next() {
		var (
			m      consumed
			body   []byte
			attrs  []byte
			sentAt time.Time
		)
		require.NoError(f.t, rows.Scan(&m.ID, &body, &attrs, &m.Group, &m.DedupID, &m.Receipt, &m.ReceiveCount, &sentAt))
		require.NoError(f.t, json.Unmarshal(body, &m.Body))
		require.NoError(f.t, json.Unmarshal(attrs, &m.Attributes))
		require.False(f.t, sentAt.IsZero())
		if strings.Contains(target, "/") {
			// What REST shows of a delivery: the event (its attributes
			// are the event's), no group or dedup id.
			require.Equal(f.t, m.Body.(map[string]any)["attributes"], m.Attributes, "a delivery's attributes are its event's")
			m.Attributes, m.Group, m.DedupID = nil, nil, nil
		}
		out = append(out, m)
	}
	return out, sqlError(f.t, rows.Err())
}

func (f sqlFace) settle(action, target string, receipts []string, opts map[string]any) ([]string, *apiError) {
	ctx := context.Background()
	var (
		sql  string
		args = []any{target, receipts}
	)
	switch action {
	case "ack":
		sql = `SELECT receipt, status FROM ferry.ack($1, $2)`
	case "nack":
		o, err := json.Marshal(opts)
		require.NoError(f.t, err)
		sql, args = `SELECT receipt, status FROM ferry.nack($1, $2, $3::jsonb)`, append(args, string(o))
	case "extend":
		var timeout *int
		if v, ok := opts["visibility_timeout_seconds"]; ok {
			n := v.(int)
			timeout = &n
		}
		sql, args = `SELECT receipt, status FROM ferry.extend($1, $2, $3)`, append(args, timeout)
	}
	rows, err := f.db.Query(ctx, sql, args...)
	require.NoError(f.t, err)
	defer rows.Close()
	var statuses []string
	for rows.Next() {
		var receipt, status string
		require.NoError(f.t, rows.Scan(&receipt, &status))
		require.Equal(f.t, receipts[len(statuses)], receipt, "results in request order")
		statuses = append(statuses, status)
	}
	return statuses, sqlError(f.t, rows.Err())
}

// consumeRun is one face running one case: its target, the ids of what
// was sent to it (in send order), and what it received so far.
type consumeRun struct {
	t        *testing.T
	env      *ferrytest.Env
	face     consumerFace
	target   string
	sent     []string
	received [][]consumed
}

// receipt is the receipt of the j-th message of the i-th receive that
// returned messages (negative i counts from the last).
func (r *consumeRun) receipt(i, j int) string {
	if i < 0 {
		i += len(r.received)
	}
	return r.received[i][j].Receipt
}

func (r *consumeRun) stats() client.QueueStats {
	var s client.QueueStats
	if topic, sub, ok := strings.Cut(r.target, "/"); ok {
		s = subCounts(r.t, r.env, topic, sub)
	} else {
		s = counts(r.t, r.env, r.target)
	}
	return s
}

// consumeStep is one call of a case; what it gives to the transcript is
// compared between the faces.
type consumeStep func(r *consumeRun) any

func ip(n int) *int { return &n }

// recv receives and requires n messages (or the error status).
func recv(max, timeout *int, n int) consumeStep {
	return func(r *consumeRun) any {
		msgs, e := r.face.receive(r.target, max, timeout)
		if e != nil {
			return *e
		}
		require.Len(r.t, msgs, n, "received")
		var out []any
		for _, m := range msgs {
			rc, err := store.ParseReceipt(m.Receipt)
			require.NoError(r.t, err, "a receipt of store.Receipt's encoding")
			idx := indexOf(r.sent, m.ID)
			require.GreaterOrEqual(r.t, idx, 0, "received %s, which was not sent", m.ID)
			if !strings.Contains(r.target, "/") {
				require.Equal(r.t, m.ID, store.FormatMessageID(rc.MessageID), "the receipt names the message")
			}
			out = append(out, map[string]any{"sent": idx, "body": m.Body, "attributes": m.Attributes,
				"group": m.Group, "dedup_id": m.DedupID, "receive_count": m.ReceiveCount})
		}
		if len(msgs) > 0 {
			r.received = append(r.received, msgs)
		}
		return out
	}
}

// settleStep acks, nacks or extends the receipts pick chooses, and
// requires the statuses want (nil: an error, compared between the faces).
func settleStep(action string, pick func(r *consumeRun) []string, opts map[string]any, want ...string) consumeStep {
	return func(r *consumeRun) any {
		statuses, e := r.face.settle(action, r.target, pick(r), opts)
		if e != nil {
			require.Nil(r.t, want, "%s failed: %+v", action, e)
			return *e
		}
		require.Equal(r.t, want, statuses, action)
		return statuses
	}
}

// nth picks receipts (i, j) of earlier receives.
func nth(pairs ...[2]int) func(r *consumeRun) []string {
	return func(r *consumeRun) []string {
		var out []string
		for _, p := range pairs {
			out = append(out, r.receipt(p[0], p[1]))
		}
		return out
	}
}

// allOf picks every receipt of the i-th receive.
func allOf(i int) func(r *consumeRun) []string {
	return func(r *consumeRun) []string {
		if i < 0 {
			i += len(r.received)
		}
		return pluck(r.received[i], func(m consumed) string { return m.Receipt })
	}
}

func literal(rs ...string) func(r *consumeRun) []string {
	return func(*consumeRun) []string { return rs }
}

// statsStep records the target's counts.
func statsStep(want client.QueueStats) consumeStep {
	return func(r *consumeRun) any {
		s := r.stats()
		require.Equal(r.t, want, s, "stats")
		return s
	}
}

// deadStep records the target's dead letters (which sent message, how
// often received, last error).
func deadStep(n int) consumeStep {
	return func(r *consumeRun) any {
		var out []any
		if topic, sub, ok := strings.Cut(r.target, "/"); ok {
			for _, d := range subDeadLetters(r.t, r.env, topic, sub, "").Messages {
				out = append(out, []any{indexOf(r.sent, d.ID), d.ReceiveCount, d.LastError})
			}
		} else {
			for _, d := range deadLetters(r.t, r.env, r.target, "").Messages {
				out = append(out, []any{indexOf(r.sent, d.ID), d.ReceiveCount, d.LastError})
			}
		}
		require.Len(r.t, out, n, "dead letters")
		return out
	}
}

// awaitIdle waits until nothing of the target is in flight (leases
// expired).
func awaitIdle() consumeStep {
	return func(r *consumeRun) any {
		ferrytest.WaitFor(r.t, 10*time.Second, "leases to expire", func() bool { return r.stats().InFlight == 0 })
		return "idle"
	}
}

// sendStep sends more messages to the target (a queue).
func sendStep(msgs ...map[string]any) consumeStep {
	return func(r *consumeRun) any {
		r.sent = append(r.sent, ids(send(r.t, r.env, r.target, msgs...))...)
		return len(msgs)
	}
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

// consumeCase is one behaviour: a queue (or, with events, a
// subscription) configured with cfg, fed msgs or events, then steps.
type consumeCase struct {
	name   string
	cfg    map[string]any
	msgs   []map[string]any
	events []map[string]any // a subscription's case: published to its topic
	// target, when set, is used as it is (names REST and SQL must refuse
	// or not find alike) instead of the case's own queue.
	target string
	steps  []consumeStep
}

// failing is a settle step's want when the call must fail (with the
// same error through both faces).
var failing = []string(nil)

func consumeCases() []consumeCase {
	one := []map[string]any{msg(map[string]any{"n": 1}, "attributes", map[string]string{"a": "1"}, "dedup_id", "d-1")}
	three := []map[string]any{msg(map[string]any{"n": 1}), msg(map[string]any{"n": 2}), msg(map[string]any{"n": 3})}
	valid := store.Receipt{MessageID: 1, Token: 2}.String()
	tooMany := repeat(valid, 1001)
	return []consumeCase{
		{name: "receive_ack", msgs: three, steps: []consumeStep{
			recv(ip(2), nil, 2),
			settleStep("ack", allOf(0), nil, "ok", "ok"),
			recv(ip(10), nil, 1),
			settleStep("ack", allOf(1), nil, "ok"),
			recv(ip(10), nil, 0),
			settleStep("ack", allOf(0), nil, "stale", "stale"),
			statsStep(client.QueueStats{}),
		}},
		{name: "defaults", msgs: one, steps: []consumeStep{
			recv(nil, nil, 1),
			statsStep(client.QueueStats{InFlight: 1}),
			settleStep("ack", nth([2]int{0, 0}, [2]int{0, 0}), nil, "ok", "ok"),
		}},
		{name: "nack_delay_zero_redelivers", msgs: one, steps: []consumeStep{
			recv(nil, nil, 1),
			settleStep("nack", allOf(0), map[string]any{"delay_seconds": 0}, "ok"),
			recv(nil, nil, 1),
			settleStep("ack", allOf(0), nil, "stale"),
			settleStep("extend", allOf(1), map[string]any{"visibility_timeout_seconds": 60}, "ok"),
			settleStep("ack", allOf(1), nil, "ok"),
		}},
		{name: "nack_backoff", msgs: one, steps: []consumeStep{
			recv(nil, nil, 1),
			settleStep("nack", allOf(0), map[string]any{}, "ok"),
			recv(nil, nil, 0),
			statsStep(client.QueueStats{Delayed: 1}),
		}},
		{name: "nack_delay", msgs: three, steps: []consumeStep{
			recv(ip(3), nil, 3),
			settleStep("nack", nth([2]int{0, 0}), map[string]any{"delay_seconds": 600, "error": "later"}, "ok"),
			settleStep("nack", nth([2]int{0, 1}), map[string]any{"delay_seconds": 0, "error": "boom", "dead_letter": false}, "ok"),
			settleStep("nack", nth([2]int{0, 2}), map[string]any{"delay_seconds": nil, "error": nil, "dead_letter": nil}, "ok"),
			statsStep(client.QueueStats{Available: 1, Delayed: 2}),
		}},
		{name: "nack_dead_letter", msgs: three, steps: []consumeStep{
			recv(ip(3), nil, 3),
			settleStep("nack", nth([2]int{0, 1}), map[string]any{"dead_letter": true, "error": "poison"}, "ok"),
			settleStep("nack", nth([2]int{0, 1}), map[string]any{"dead_letter": true}, "stale"),
			deadStep(1),
			statsStep(client.QueueStats{InFlight: 2, DeadLetters: 1}),
		}},
		{name: "nack_last_receive_dead_letters", cfg: map[string]any{"max_receives": 1}, msgs: three, steps: []consumeStep{
			recv(ip(3), nil, 3),
			settleStep("nack", allOf(0), map[string]any{"delay_seconds": 0}, "ok", "ok", "ok"),
			recv(ip(10), nil, 0),
			deadStep(3),
		}},
		{name: "max_receives_exhausted_passes", cfg: map[string]any{"max_receives": 1}, msgs: three, steps: []consumeStep{
			recv(ip(3), ip(1), 3),
			awaitIdle(),
			sendStep(msg(map[string]any{"n": 4})),
			// Pass one dead-letters two, pass two one and claims the
			// fourth.
			recv(ip(2), nil, 1),
			deadStep(3),
			statsStep(client.QueueStats{InFlight: 1, DeadLetters: 3}),
		}},
		{name: "extend", msgs: three, steps: []consumeStep{
			recv(ip(2), ip(1), 2),
			settleStep("extend", allOf(0), map[string]any{"visibility_timeout_seconds": 600}, "ok", "ok"),
			settleStep("ack", nth([2]int{0, 0}), nil, "ok"),
			settleStep("extend", allOf(0), map[string]any{"visibility_timeout_seconds": 600}, "stale", "ok"),
			statsStep(client.QueueStats{Available: 1, InFlight: 1}),
		}},
		{name: "groups", msgs: []map[string]any{
			msg("a1", "group", "a"), msg("a2", "group", "a"), msg("b1", "group", "b"), msg("plain"),
		}, steps: []consumeStep{
			recv(ip(10), nil, 3),
			recv(ip(10), nil, 0),
			settleStep("ack", nth([2]int{0, 0}), nil, "ok"),
			recv(ip(10), nil, 1),
			settleStep("nack", nth([2]int{0, 1}), map[string]any{"dead_letter": true}, "ok"),
			settleStep("ack", allOf(1), nil, "ok"),
			recv(ip(10), nil, 0),
			deadStep(1),
		}},
		{name: "group_head_dead_letter_promotes", msgs: []map[string]any{msg("a1", "group", "a"), msg("a2", "group", "a")}, steps: []consumeStep{
			recv(ip(10), nil, 1),
			settleStep("nack", allOf(0), map[string]any{"dead_letter": true}, "ok"),
			recv(ip(10), nil, 1),
		}},
		{name: "range_errors", msgs: one, steps: []consumeStep{
			recv(ip(0), nil, 0),
			recv(ip(101), nil, 0),
			recv(nil, ip(-1), 0),
			recv(nil, ip(43201), 0),
			recv(nil, ip(0), 1), // received, and visible again at once
			recv(nil, ip(0), 1),
			recv(ip(0), ip(0), 0),
			recv(ip(100), ip(43200), 1),
			settleStep("ack", literal(), nil, failing...),
			settleStep("ack", literal([]string(nil)...), nil, failing...),
			settleStep("ack", literal(tooMany...), nil, failing...),
			settleStep("ack", literal(valid, "AAAAAAAAAAAAAAAAAAAAAB"), nil, failing...),
			settleStep("ack", literal(valid, valid+"="), nil, failing...),
			settleStep("ack", literal(valid, "AAAAAAAAAAAAAAAAAAAAA+"), nil, failing...),
			settleStep("ack", literal(valid, ""), nil, failing...),
			settleStep("ack", literal(valid), nil, "stale"),
			settleStep("nack", literal(valid), map[string]any{"delay": 1}, failing...),
			settleStep("nack", literal(valid), map[string]any{"Delay_seconds": 1}, failing...),
			settleStep("nack", literal(valid), map[string]any{"delay_seconds": -1}, failing...),
			settleStep("nack", literal(valid), map[string]any{"delay_seconds": 43201}, failing...),
			settleStep("nack", literal(valid), map[string]any{"delay_seconds": 43200}, "stale"),
			settleStep("nack", literal(valid), map[string]any{"delay_seconds": "5"}, failing...),
			settleStep("nack", literal(valid), map[string]any{"delay_seconds": 1.5}, failing...),
			settleStep("nack", literal(valid), map[string]any{"error": 5}, failing...),
			settleStep("nack", literal(valid), map[string]any{"dead_letter": "yes"}, failing...),
			settleStep("nack", literal(valid), map[string]any{"error": strings.Repeat("e", 4097)}, failing...),
			settleStep("nack", literal(valid), map[string]any{"error": strings.Repeat("e", 4096)}, "stale"),
			settleStep("nack", literal(valid), map[string]any{"delay_seconds": -1, "error": strings.Repeat("e", 4097)}, failing...),
			settleStep("nack", literal("x"), map[string]any{"delay_seconds": -1}, failing...),
			settleStep("extend", literal(valid), map[string]any{}, failing...),
			settleStep("extend", literal(valid), map[string]any{"visibility_timeout_seconds": 0}, failing...),
			settleStep("extend", literal(valid), map[string]any{"visibility_timeout_seconds": 43201}, failing...),
			settleStep("extend", literal(valid), map[string]any{"visibility_timeout_seconds": 1}, "stale"),
		}},
		{name: "unknown_queue", target: "no-such-queue", steps: []consumeStep{
			recv(nil, nil, 0),
			recv(ip(0), nil, 0),
			settleStep("ack", literal(valid), nil, failing...),
			settleStep("ack", literal("x"), nil, failing...),
			settleStep("nack", literal(valid), map[string]any{"delay_seconds": 0}, failing...),
			settleStep("extend", literal(valid), map[string]any{"visibility_timeout_seconds": 5}, failing...),
		}},
		{name: "malformed_queue_name", target: "bad name!", steps: []consumeStep{
			recv(ip(0), nil, 0),
			settleStep("ack", literal("x"), nil, failing...),
		}},
		{name: "malformed_subscription_name", target: "t/bad name!", steps: []consumeStep{
			recv(nil, nil, 0),
			settleStep("nack", literal(valid), map[string]any{}, failing...),
		}},
		{name: "malformed_topic_name", target: "-t/s", steps: []consumeStep{
			recv(nil, nil, 0),
			settleStep("extend", literal(valid), map[string]any{"visibility_timeout_seconds": 5}, failing...),
		}},
		{name: "unknown_subscription", target: "no-such-topic/s", steps: []consumeStep{
			recv(nil, nil, 0),
			settleStep("ack", literal(valid), nil, failing...),
		}},
		{name: "subscription_receive_ack", events: []map[string]any{
			evt("order.created", "id", "e-1", "data", map[string]any{"n": 1}, "attributes", map[string]string{"a": "1"}),
			evt("order.created", "id", "e-2", "data", map[string]any{"n": 2}),
			evt("order.paid", "id", "e-3", "key", "k"),
		}, steps: []consumeStep{
			recv(ip(2), nil, 2),
			settleStep("ack", allOf(0), nil, "ok", "ok"),
			recv(ip(2), nil, 1),
			settleStep("nack", allOf(1), map[string]any{"delay_seconds": 0}, "ok"),
			recv(ip(2), nil, 1),
			settleStep("extend", allOf(2), map[string]any{"visibility_timeout_seconds": 60}, "ok"),
			settleStep("nack", allOf(2), map[string]any{"dead_letter": true, "error": "no"}, "ok"),
			deadStep(1),
			statsStep(client.QueueStats{DeadLetters: 1}),
		}},
		{name: "subscription_ordered", cfg: map[string]any{"ordered": true}, events: []map[string]any{
			evt("t", "id", "o-1", "key", "k1"), evt("t", "id", "o-2", "key", "k1"), evt("t", "id", "o-3", "key", "k2"),
		}, steps: []consumeStep{
			recv(ip(10), nil, 2),
			settleStep("ack", allOf(0), nil, "ok", "ok"),
			recv(ip(10), nil, 1),
		}},
		{name: "subscription_max_receives", cfg: map[string]any{"max_receives": 1}, events: []map[string]any{
			evt("t", "id", "m-1"), evt("t", "id", "m-2"),
		}, steps: []consumeStep{
			recv(ip(1), ip(1), 1),
			awaitIdle(),
			recv(ip(10), nil, 1),
			deadStep(1),
		}},
	}
}

// TestSQLConsumeSameAsREST runs every consumer case through REST and
// through the SQL API, each on a target of its own, and requires the same
// transcript: messages (which sent message, body, attributes, group,
// dedup id, receive count), receipt statuses, errors (status, code,
// detail), stats and dead letters.
func TestSQLConsumeSameAsREST(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	db, err := pgxpool.New(context.Background(), env.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	for i, c := range consumeCases() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env := forTest(env, t)
			faces := []struct {
				name string
				face consumerFace
			}{{"rest", restFace{t, env}}, {"sql", sqlFace{t, db}}}
			transcripts := make([][]any, len(faces))
			topic := fmt.Sprintf("t%d", i)
			if c.events != nil {
				putTopic(t, env, topic, nil, http.StatusCreated)
			}
			runs := make([]*consumeRun, len(faces))
			for k, f := range faces {
				r := &consumeRun{t: t, env: env, face: f.face, target: c.target}
				switch {
				case c.target != "":
				case c.events != nil:
					r.target = topic + "/" + f.name
					putSub(t, env, topic, f.name, c.cfg, http.StatusCreated)
				default:
					r.target = fmt.Sprintf("%s-%s", strings.ReplaceAll(c.name, "_", "-"), f.name)
					putQueue(t, env, r.target, c.cfg)
					if len(c.msgs) > 0 {
						r.sent = ids(send(t, env, r.target, c.msgs...))
					}
				}
				runs[k] = r
			}
			if c.events != nil {
				published := pluck(publishEvents(t, env, topic, c.events...), func(p client.Published) string { return p.ID })
				for _, r := range runs {
					r.sent = published
				}
			}
			for k, r := range runs {
				for _, step := range c.steps {
					transcripts[k] = append(transcripts[k], step(r))
				}
			}
			if os.Getenv("FERRY_SQLAPI_DUMP") != "" {
				t.Logf("%s: %+v", c.name, transcripts[1])
			}
			require.Equal(t, transcripts[0], transcripts[1], "REST (expected) and SQL (actual) answered alike")
			for _, entry := range transcripts[0] {
				if e, ok := entry.(apiError); ok {
					require.NotEmpty(t, e.Detail)
				}
			}
		})
	}
}

// TestSQLConsumeErrors pins a few of the SQL API's errors exactly: the
// SQLSTATE and the message.
func TestSQLConsumeErrors(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	putQueue(t, env, "q", nil)
	db, err := pgxpool.New(context.Background(), env.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	valid := store.Receipt{MessageID: 1, Token: 2}.String()
	for _, c := range []struct {
		sql   string
		args  []any
		state string
		msg   string
	}{
		{`SELECT * FROM ferry.receive('q', 0)`, nil, "FR400", "ferry: invalid_request: max_messages: must be between 1 and 100"},
		{`SELECT * FROM ferry.receive('q', 0, -1)`, nil, "FR400",
			"ferry: invalid_request: 2 invalid fields; first: max_messages: must be between 1 and 100"},
		{`SELECT * FROM ferry.receive('nope')`, nil, "FR404", "ferry: not_found: no such resource"},
		{`SELECT * FROM ferry.receive('a/b/c')`, nil, "FR400", `ferry: invalid_request: sub: must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`},
		{`SELECT * FROM ferry.receive('/s')`, nil, "FR400", `ferry: invalid_request: topic: must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`},
		{`SELECT * FROM ferry.receive('t/')`, nil, "FR400", `ferry: invalid_request: sub: must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`},
		{`SELECT * FROM ferry.receive(NULL)`, nil, "FR400", `ferry: invalid_request: target: is required`},
		{`SELECT * FROM ferry.ack('q', $1)`, []any{[]string{valid, "nope"}}, "FR400",
			"ferry: invalid_request: receipts[1]: is not a receipt issued by Ferry"},
		{`SELECT * FROM ferry.ack('q', $1)`, []any{repeat(valid, 1001)}, "FR413",
			"ferry: payload_too_large: a batch holds at most 1000 receipts, not 1001"},
		{`SELECT * FROM ferry.ack('q', '{}')`, nil, "FR400", "ferry: invalid_request: receipts: must not be empty"},
		{`SELECT * FROM ferry.ack('q', '{{a},{b}}')`, nil, "FR400", "ferry: invalid_request: receipts: must be an array of strings"},
		{`SELECT * FROM ferry.nack('q', $1, '{"later": 1}')`, []any{[]string{valid}}, "FR400",
			"ferry: invalid_request: later: unknown field (member names are case-sensitive)"},
		{`SELECT * FROM ferry.nack('q', $1, '[]')`, []any{[]string{valid}}, "FR400",
			"ferry: invalid_request: options: must be an object, not array"},
		{`SELECT * FROM ferry.nack('q', $1, '{"delay_seconds": 99999999999999999999}')`, []any{[]string{valid}}, "FR400",
			"ferry: invalid_request: delay_seconds: must be between 0 and 43200"},
		{`SELECT * FROM ferry.extend('q', $1, NULL)`, []any{[]string{valid}}, "FR400",
			"ferry: invalid_request: visibility_timeout_seconds: is required"},
	} {
		_, err := db.Exec(context.Background(), c.sql, c.args...)
		var pg *pgconn.PgError
		require.True(t, errors.As(err, &pg), "%s: %v", c.sql, err)
		require.Equal(t, c.state, pg.Code, c.sql)
		require.Equal(t, c.msg, pg.Message, c.sql)
	}
	// A NULL options object is no options; the stale receipt changes
	// nothing.
	var status string
	require.NoError(t, db.QueryRow(context.Background(), `SELECT status FROM ferry.nack('q', $1, NULL)`, []string{valid}).Scan(&status))
	require.Equal(t, "stale", status)
}
