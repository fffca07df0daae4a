package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/handlers"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// The SQL API refuses what REST refuses (issue 18; migration 000011),
// and whatever either accepts, every answer can carry.

// nestedArrays is [[...]] nesting n levels; nestedObjects {"a":{"a":...1}}.
func nestedArrays(n int) string  { return strings.Repeat("[", n) + strings.Repeat("]", n) }
func nestedObjects(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }

// ruleCase is one input of TestSQLRulesAsREST: the items (JSON text) of a
// send's messages or a publish's events array.
type ruleCase struct {
	name    string
	publish bool
	items   string
	// detailDiffers: REST's detail comes from Go's JSON decoder; status
	// and code must still agree.
	detailDiffers bool
}

// ruleCases are inputs at the edges of REST's rules that the SQL API once
// took otherwise: nesting depth (handlers.MaxValueDepth), deliver_at as
// RFC 3339 spells it, byte lengths, and attributes measured as REST
// encodes them.
func ruleCases() []ruleCase {
	day := time.Now().UTC().Add(24 * time.Hour).Format("2006-01-02")
	at := func(s string) string { return `{"body":1,"deliver_at":"` + day + s + `"}` }
	over := handlers.MaxValueDepth + 1
	// A body whose string and attributes ({"k":"<"}, 14 bytes as Go
	// writes them: \u003c) are the default limit exactly, or one over.
	sized := func(member string, extra int, attrs string) string {
		return `{"` + member + `":"` + strings.Repeat("x", 262144-2-len(`{"k":"\u003c"}`)+extra) + `","attributes":` + attrs + `}`
	}
	cases := []ruleCase{
		{name: "body at the depth limit, arrays", items: `{"body":` + nestedArrays(handlers.MaxValueDepth) + `}`},
		{name: "body at the depth limit, objects", items: `{"body":` + nestedObjects(handlers.MaxValueDepth) + `}`},
		{name: "body one level too deep, arrays", items: `{"body":` + nestedArrays(over) + `}`},
		{name: "body one level too deep, objects", items: `{"body":` + nestedObjects(over) + `}`},
		{name: "body too deep inside a member", items: `{"body":{"a":1,"b":[` + nestedArrays(over-2) + `]}}`},
		{name: "second body too deep", items: `{"body":1,"group":""},{"body":` + nestedArrays(over) + `}`},
		{name: "body as deep as the issue's", items: `{"body":` + nestedArrays(10001) + `}`},
		{name: "brackets in a string are no depth", items: `{"body":"` + nestedArrays(20000) + `"}`},
		// REST's decoder names the array, SQL the element (TestSQLSendShapeFastExit).
		{name: "a message that is an array of one", items: `[{"body":1}]`, detailDiffers: true},
		{name: "a message that is an empty array", items: `{"body":1},[]`, detailDiffers: true},
		{name: "an event that is an array of one", items: `[{"type":"t"}]`, publish: true, detailDiffers: true},
		{name: "deliver_at Z", items: at("T15:04:05Z")},
		{name: "deliver_at long fraction", items: at("T15:04:05.1234567891Z")},
		{name: "deliver_at -00:00", items: at("T15:04:05-00:00")},
		{name: "deliver_at +23:59", items: at("T15:04:05+23:59")},
		{name: "deliver_at +15:59", items: at("T15:04:05+15:59")},
		{name: "deliver_at +24:00", items: at("T15:04:05+24:00")},
		{name: "deliver_at +00:60", items: at("T15:04:05+00:60")},
		{name: "deliver_at comma fraction", items: at("T15:04:05,5Z")},
		{name: "deliver_at empty fraction", items: at("T15:04:05.Z")},
		{name: "deliver_at lowercase t", items: at("t15:04:05Z")},
		{name: "deliver_at leap second", items: at("T15:04:60Z")},
		{name: "deliver_at year 0000", items: `{"body":1,"deliver_at":"0000-01-02T15:04:05Z"}`},
		{name: "deliver_at and a bad group", items: `{"body":1,"group":"","deliver_at":"` + day + `T15:04:05,5Z"}`},
		{name: "group of 128 bytes", items: `{"body":1,"group":"` + strings.Repeat("é", 64) + `"}`},
		{name: "group of 129 bytes", items: `{"body":1,"group":"` + strings.Repeat("é", 64) + `x"}`},
		{name: "dedup_id of 129 bytes", items: `{"body":1,"dedup_id":"x` + strings.Repeat("é", 64) + `"}`},
		{name: "body and escaped attributes at the limit", items: sized("body", 0, `{"k":"<"}`)},
		{name: "body and escaped attributes over the limit", items: sized("body", 1, `{"k":"<"}`)},
		{name: "data at the depth limit", publish: true, items: `{"type":"t","data":` + nestedObjects(handlers.MaxValueDepth) + `}`},
		{name: "data one level too deep", publish: true, items: `{"type":"t","data":` + nestedArrays(over) + `}`},
		{name: "second data too deep", publish: true, items: `{"type":""},{"type":"t","data":` + nestedObjects(over) + `}`},
		{name: "data as deep as the issue's", publish: true, items: `{"type":"t","data":` + nestedArrays(10001) + `}`},
		{name: "attribute null", publish: true, items: `{"type":"t","attributes":{"a":null,"b":"c"}}`},
		{name: "traceparent null", publish: true, items: `{"type":"t","attributes":{"traceparent":null}}`},
		{name: "data and escaped attributes at the limit", publish: true, items: `{"type":"t",` + sized("data", 0, `{"k":"<"}`)[1:]},
		{name: "data and escaped attributes over the limit", publish: true, items: `{"type":"t",` + sized("data", 1, `{"k":"<"}`)[1:]},
		{name: "data and a line separator over the limit", publish: true,
			items: `{"type":"t",` + sized("data", 1, `{"k":"\u2028"}`)[1:]},
	}
	return cases
}

// TestSQLRulesAsREST runs one table of inputs through both faces, REST
// (POST .../messages, .../events) and SQL (ferry.send_batch,
// ferry.publish_batch): both accept, or both refuse with the same status
// (4xx, SQLSTATE FR4xx), code and detail. The depth rule is one value on
// both faces (handlers.MaxValueDepth, ferry.max_value_depth()), and the
// single-value functions (ferry.send, ferry.publish) hold it too.
func TestSQLRulesAsREST(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	db := sqlDB(t, env.DatabaseURL)
	ctx := context.Background()
	var sqlDepth int
	require.NoError(t, db.QueryRow(ctx, `SELECT ferry.max_value_depth()`).Scan(&sqlDepth))
	require.Equal(t, handlers.MaxValueDepth, sqlDepth, "one depth rule on both faces")
	putQueue(t, env, "rules", nil)
	putTopic(t, env, "rules", nil, http.StatusCreated)

	for _, c := range ruleCases() {
		t.Run(c.name, func(t *testing.T) {
			e := forTest(env, t)
			path, member, fn := qpath("rules", "/messages"), "messages", "send_batch"
			if c.publish {
				path, member, fn = tpath("rules", "/events"), "events", "publish_batch"
			}
			r := e.Do("POST", path, `{"`+member+`":[`+c.items+`]}`)
			var p struct{ Code, Detail string }
			if r.Status >= 400 {
				r.JSON(t, &p)
			}
			tx, err := db.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = tx.Exec(ctx, `SELECT * FROM ferry.`+fn+`('rules', $1::jsonb)`, `[`+c.items+`]`)
			if r.Status < 400 {
				require.NoError(t, err, "REST answered %d", r.Status)
				return
			}
			require.Error(t, err, "REST answered %d %s", r.Status, p.Detail)
			status, code, detail := sqlProblem(t, err)
			require.Equal(t, []any{r.Status, p.Code}, []any{status, code}, "REST: %s; SQL: %s", p.Detail, detail)
			if !c.detailDiffers {
				require.Equal(t, p.Detail, detail)
			}
		})
	}

	for _, c := range []struct {
		query, arg, detail string
	}{
		{`SELECT * FROM ferry.send('rules', $1::jsonb)`, nestedArrays(handlers.MaxValueDepth + 1), "body: must not nest deeper than 9996 levels"},
		{`SELECT * FROM ferry.send('rules', $1::jsonb)`, nestedArrays(10001), "body: must not nest deeper than 9996 levels"},
		{`SELECT * FROM ferry.publish('rules', 't', $1::jsonb)`, nestedObjects(handlers.MaxValueDepth + 1), "data: must not nest deeper than 9996 levels"},
		{`SELECT * FROM ferry.send('rules', $1::jsonb)`, nestedObjects(handlers.MaxValueDepth), ""},
		{`SELECT * FROM ferry.publish('rules', 't', $1::jsonb)`, nestedArrays(handlers.MaxValueDepth), ""},
	} {
		_, err := db.Exec(ctx, c.query, c.arg)
		if c.detail == "" {
			require.NoError(t, err, c.query)
			continue
		}
		status, code, detail := sqlProblem(t, err)
		require.Equal(t, []any{400, "invalid_request", c.detail}, []any{status, code, detail}, c.query)
	}
}

// compactText is JSON text without spaces (for values with none in their
// strings): jsonb writes a space after ':' and ','.
func compactText(raw []byte) string { return strings.ReplaceAll(string(raw), " ", "") }

// plainPost POSTs body (JSON text) with the admin key through a client
// that does not check the answer against the spec (kin-openapi walks a
// value nested in arrays once per level per branch of the spec's anyOf,
// which does not end for thousands of levels), requires a 200, and
// decodes it with encoding/json into v: within its 10000 levels.
func plainPost(t testing.TB, env *ferrytest.Env, path, body string, v any) {
	t.Helper()
	r := rawDo(t, env, "POST", path, []byte(body), http.Header{
		"Authorization": {"Bearer " + ferrytest.AdminKey}, "Content-Type": {"application/json"},
	})
	require.Equal(t, http.StatusOK, r.Status, "%s: %.300s", path, r.Body)
	require.NoError(t, json.Unmarshal(r.Body, v), "%s: the answer decodes", path)
}

// TestSQLMaxDepthCarriedByEveryAnswer: a body and an event's data as deep
// as the rule allows, sent and published through the SQL API, come back
// whole in every answer that carries them: a receive, the dead letters,
// event reads, a subscription's receive and dead letters, and a group's
// poll (each answer checked against the spec, and decoded by
// encoding/json: within its 10000 levels). Objects: the spec's check
// walks them in one step (arrays: TestSQLCannotCreateUnencodable).
func TestSQLMaxDepthCarriedByEveryAnswer(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	db := sqlDB(t, env.DatabaseURL)
	ctx := context.Background()
	body, data := nestedObjects(handlers.MaxValueDepth), nestedObjects(handlers.MaxValueDepth)
	putQueue(t, env, "deep", map[string]any{"max_receives": 1})
	putTopic(t, env, "deep", map[string]any{"partitions": 1}, http.StatusCreated)
	putSub(t, env, "deep", "s", map[string]any{"max_receives": 1}, http.StatusCreated)
	_, err := db.Exec(ctx, `SELECT * FROM ferry.send('deep', $1::jsonb)`, body)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `SELECT * FROM ferry.publish('deep', 'deep', $1::jsonb)`, data)
	require.NoError(t, err)
	pendingDrained(t, db)

	got := receive(t, env, "deep", nil)
	require.Len(t, got, 1)
	require.Equal(t, body, compactText(got[0].Body), "a receive")
	require.Equal(t, []string{"ok"}, settle(t, env, "deep", "nack", map[string]any{"receipts": receipts(got), "dead_letter": true}))
	dls := deadLetters(t, env, "deep", "")
	require.Len(t, dls.Messages, 1)
	require.Equal(t, body, compactText(dls.Messages[0].Body), "the dead letters")

	var page client.EventPage
	r := env.Do("GET", tpath("deep", "/events?partition=0"), nil)
	require.Equal(t, http.StatusOK, r.Status)
	r.JSON(t, &page)
	require.Len(t, page.Events, 1)
	require.Equal(t, data, compactText(page.Events[0].Data), "an event read")

	var subGot struct{ Messages []client.Delivery }
	r = env.Do("POST", spath("deep", "s", "/receive"), map[string]any{})
	require.Equal(t, http.StatusOK, r.Status)
	r.JSON(t, &subGot)
	require.Len(t, subGot.Messages, 1)
	require.Equal(t, data, compactText(subGot.Messages[0].Event.Data), "a subscription's receive")
	r = env.Do("POST", spath("deep", "s", "/nack"), map[string]any{"receipts": []string{subGot.Messages[0].Receipt}, "dead_letter": true})
	require.Equal(t, http.StatusOK, r.Status)
	var subDead struct{ Messages []client.EventDeadLetter }
	r = env.Do("GET", spath("deep", "s", "/dead-letters"), nil)
	require.Equal(t, http.StatusOK, r.Status)
	r.JSON(t, &subDead)
	require.Len(t, subDead.Messages, 1)
	require.Equal(t, data, compactText(subDead.Messages[0].Event.Data), "a subscription's dead letters")

	var poll client.Polled
	r = env.Do("POST", gpath("deep", "g", "/poll"), map[string]any{"consumer": "c", "start": "earliest"})
	require.Equal(t, http.StatusOK, r.Status)
	r.JSON(t, &poll)
	require.Len(t, poll.Events, 1)
	require.Equal(t, data, compactText(poll.Events[0].Data), "a group's poll")
}

// TestStoredValuesTooDeepForAnswers: values deeper than any answer can
// carry, written to Ferry's tables directly (the SQL API refuses them;
// before migration 000011 it took them), do not take down the answers of
// their neighbours. A receive delivers the others and dead-letters such a
// message at once, saying why; the dead letters, event reads, a
// subscription's dead letters and a group's poll answer, with the value
// shown as null.
func TestStoredValuesTooDeepForAnswers(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	conn := dbConn(t, env.DatabaseURL)
	ctx := context.Background()
	deep := nestedArrays(10001)
	tooDeep := func(sql string, args ...any) {
		t.Helper()
		tag, err := conn.Exec(ctx, sql, append([]any{deep}, args...)...)
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected(), sql)
	}

	putQueue(t, env, "poisoned", nil)
	sent := ids(send(t, env, "poisoned", msg(1), msg(2), msg(3)))
	tooDeep(`UPDATE ferry.messages SET body = $1::json WHERE id = $2::bigint`, sent[1])
	got := receive(t, env, "poisoned", map[string]any{"max_messages": 10})
	require.Equal(t, []string{sent[0], sent[2]}, msgIDs(got), "the neighbours are delivered")
	require.Equal(t, client.QueueStats{InFlight: 2, DeadLetters: 1}, counts(t, env, "poisoned"))
	dls := deadLetters(t, env, "poisoned", "")
	require.Len(t, dls.Messages, 1)
	require.Equal(t, sent[1], dls.Messages[0].ID)
	require.JSONEq(t, `null`, string(dls.Messages[0].Body))
	require.NotNil(t, dls.Messages[0].LastError)
	require.Contains(t, *dls.Messages[0].LastError, "nest deeper than 9997 levels")

	putTopic(t, env, "poisoned", map[string]any{"partitions": 1}, http.StatusCreated)
	putSub(t, env, "poisoned", "s", nil, http.StatusCreated)
	events := publishEvents(t, env, "poisoned", evt("a"), evt("b"), evt("c"))
	tooDeep(`UPDATE ferry.events SET data = $1::jsonb WHERE id = $2`, events[1].ID)
	tooDeep(`UPDATE ferry.messages SET body = jsonb_set(body::jsonb, '{data}', $1::jsonb)::json WHERE event_id = $2`, events[1].ID)

	var page client.EventPage
	r := env.Do("GET", tpath("poisoned", "/events?partition=0"), nil)
	require.Equal(t, http.StatusOK, r.Status)
	r.JSON(t, &page)
	require.Len(t, page.Events, 3)
	require.JSONEq(t, `null`, string(page.Events[1].Data), "an event read")
	var poll client.Polled
	r = env.Do("POST", gpath("poisoned", "g", "/poll"), map[string]any{"consumer": "c", "start": "earliest"})
	require.Equal(t, http.StatusOK, r.Status)
	r.JSON(t, &poll)
	require.Len(t, poll.Events, 3)
	require.JSONEq(t, `null`, string(poll.Events[1].Data), "a group's poll")

	var subGot struct{ Messages []client.Delivery }
	r = env.Do("POST", spath("poisoned", "s", "/receive"), map[string]any{"max_messages": 10})
	require.Equal(t, http.StatusOK, r.Status)
	r.JSON(t, &subGot)
	require.Equal(t, []string{events[0].ID, events[2].ID}, pluck(subGot.Messages, func(m client.Delivery) string { return m.ID }))
	var subDead struct{ Messages []client.EventDeadLetter }
	r = env.Do("GET", spath("poisoned", "s", "/dead-letters"), nil)
	require.Equal(t, http.StatusOK, r.Status)
	r.JSON(t, &subDead)
	require.Len(t, subDead.Messages, 1)
	require.Equal(t, events[1].ID, subDead.Messages[0].Event.ID, "the event's other members are shown")
	require.Equal(t, "b", subDead.Messages[0].Event.Type)
	require.JSONEq(t, `null`, string(subDead.Messages[0].Event.Data))
	require.Contains(t, *subDead.Messages[0].LastError, "nest deeper than 9997 levels")
}

// TestSQLCannotCreateUnencodable: whatever the SQL API's producers accept,
// REST can answer. Values around and beyond the depth rule, of each shape,
// through each producer function: each is refused (FR400), or its
// message or event is received over REST, whole.
func TestSQLCannotCreateUnencodable(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t)
	db := sqlDB(t, env.DatabaseURL)
	ctx := context.Background()
	putQueue(t, env, "enc", nil)
	putTopic(t, env, "enc", map[string]any{"partitions": 1}, http.StatusCreated)
	putSub(t, env, "enc", "s", nil, http.StatusCreated)
	shapes := map[string]func(int) string{
		"arrays": nestedArrays, "objects": nestedObjects,
		"mixed": func(n int) string {
			inner := "1"
			if n%2 == 1 {
				inner = "[]"
			}
			return strings.Repeat(`[{"a":`, n/2) + inner + strings.Repeat("}]", n/2)
		},
	}
	accepted := 0
	for name, shape := range shapes {
		for _, depth := range []int{handlers.MaxValueDepth - 1, handlers.MaxValueDepth, handlers.MaxValueDepth + 1,
			handlers.MaxValueDepth + 2, 9999, 10000, 10001, 10004} {
			v := shape(depth)
			for _, call := range []string{
				`SELECT id FROM ferry.send('enc', $1::jsonb)`,
				`SELECT id FROM ferry.send_batch('enc', jsonb_build_array(jsonb_build_object('body', $1::jsonb)))`,
				`SELECT id FROM ferry.publish('enc', 't', $1::jsonb)`,
				`SELECT id FROM ferry.publish_batch('enc', jsonb_build_array(jsonb_build_object('type', 't', 'data', $1::jsonb)))`,
			} {
				_, err := db.Exec(ctx, call, v)
				if err != nil {
					status, code, _ := sqlProblem(t, err)
					require.Equal(t, []any{400, "invalid_request"}, []any{status, code}, "%s %d: %s", name, depth, call)
					continue
				}
				accepted++
				require.LessOrEqual(t, depth, handlers.MaxValueDepth, "%s %d accepted by %s", name, depth, call)
				if strings.Contains(call, "send") {
					var got struct{ Messages []client.Message }
					plainPost(t, env, qpath("enc", "/receive"), `{}`, &got)
					require.Len(t, got.Messages, 1, "%s %d", name, depth)
					require.Equal(t, v, compactText(got.Messages[0].Body))
					ack(t, env, "enc", receipts(got.Messages)...)
					continue
				}
				pendingDrained(t, db)
				var subGot struct{ Messages []client.Delivery }
				plainPost(t, env, spath("enc", "s", "/receive"), `{}`, &subGot)
				require.Len(t, subGot.Messages, 1, "%s %d", name, depth)
				require.Equal(t, v, compactText(subGot.Messages[0].Event.Data))
				r := env.Do("POST", spath("enc", "s", "/ack"), map[string]any{"receipts": []string{subGot.Messages[0].Receipt}})
				require.Equal(t, http.StatusOK, r.Status)
			}
		}
	}
	require.Equal(t, 3*2*4, accepted, "the depths within the rule, each shape, each function")
	var pending int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM ferry.messages m JOIN ferry.queues q ON q.id = m.queue_id WHERE q.name = 'enc'`).Scan(&pending))
	require.Zero(t, pending)
}
