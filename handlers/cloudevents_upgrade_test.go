package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
	"github.com/ferry-mq/ferry/migrations"
)

// Deliveries written before CloudEvents support (migration 000017) carry
// the event as ferry.event_json wrote it then: no source, time,
// datacontenttype or extensions. Every face that gives a delivery fills
// the defaults of a plain JSON event (store.CloudDelivery,
// ferry.event_cloud_defaults).

// legacyPublishedAt is when the legacy events were published, and
// legacyTime the text ferry.event_json gave it.
var legacyPublishedAt = time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)

const legacyTime = "2026-01-02T03:04:05.123456Z"

// legacyDelivery is a delivery body as the release before 000017 wrote
// it (ferry.event_json of that release, jsonb's member order).
func legacyDelivery(id string, offset int) string {
	return fmt.Sprintf(`{"id": %q, "key": "K-%s", "data": {"n": %d, "s": "é"}, "type": "legacy.created", "offset": %d, `+
		`"partition": 0, "attributes": {"a": "b"}, "published_at": %q}`, id, id, offset, offset, legacyTime)
}

// migratedTo is a new database migrated to version v (and no further:
// no definitions installed, as a binary of that release would leave it
// once migrated).
func migratedTo(t *testing.T, v uint) string {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.AdminURL())
	require.NoError(t, err)
	defer admin.Close(ctx)
	name := fmt.Sprintf("ferry_legacy_%d", time.Now().UnixNano())
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		if c, err := pgx.Connect(context.Background(), pgtest.AdminURL()); err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			_ = c.Close(context.Background())
		}
	})
	u, err := url.Parse(pgtest.AdminURL())
	require.NoError(t, err)
	u.Path = "/" + name
	require.NoError(t, migrations.To(ctx, u.String(), v))
	return u.String()
}

// TestCloudEventsOfLegacyDeliveries: rows written at schema 16 (a topic,
// its subscriptions, an event, deliveries and a dead letter, as that
// release wrote them) read after migrating up: subscription receives,
// peeks and dead letters over REST (checked against the spec), event
// reads, group polls and CloudEvents batch reads, ferry.receive, and pushes in the
// cloudevents and cloudevents-binary formats parsed by sdk-go all give
// the defaults API.md names: source /ferry/topics/{topic}, time the
// publish time, datacontenttype application/json, the key as
// partitionkey.
func TestCloudEventsOfLegacyDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := migratedTo(t, 16)
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var topic int64
	require.NoError(t, conn.QueryRow(ctx, `INSERT INTO ferry.topics (name, partitions) VALUES ('legacy', 1) RETURNING id`).Scan(&topic))
	_, err = conn.Exec(ctx, `INSERT INTO ferry.topic_partitions (topic_id, partition, next_offset) VALUES ($1, 0, 1)`, topic)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO ferry.events (topic_id, partition, "offset", id, type, key, published_at, attributes, data)
		VALUES ($1, 0, 0, 'e0', 'legacy.created', 'K-e0', $2, '{"a": "b"}', '{"n": 0, "s": "é"}')`, topic, legacyPublishedAt)
	require.NoError(t, err)
	for _, sub := range []string{"pull", "sql", "structured", "binary"} {
		var q int64
		require.NoError(t, conn.QueryRow(ctx, `INSERT INTO ferry.queues (name, topic_id) VALUES ($1, $2) RETURNING id`, sub, topic).Scan(&q))
		_, err = conn.Exec(ctx, `INSERT INTO ferry.messages (queue_id, id, visible_at, sent_at, body, event_id, event_partition, event_offset)
			VALUES ($1, nextval('ferry.message_id_seq'), now(), $2, $3, 'e0', 0, 0)`, q, legacyPublishedAt, legacyDelivery("e0", 0))
		require.NoError(t, err)
		if sub == "pull" {
			_, err = conn.Exec(ctx, `INSERT INTO ferry.dead_letters (queue_id, id, sent_at, receive_count, last_error, body, event_id, event_partition, event_offset)
				VALUES ($1, nextval('ferry.message_id_seq'), $2, 5, 'HTTP 500', $3, 'e1', 0, 1)`, q, legacyPublishedAt, legacyDelivery("e1", 1))
			require.NoError(t, err)
		}
	}
	require.NoError(t, migrations.Up(ctx, dbURL))

	env := ferrytest.StartOn(t, dbURL, allowPrivatePush)
	requireLegacyRESTReads(t, env)

	var body []byte
	require.NoError(t, conn.QueryRow(ctx, `SELECT body FROM ferry.receive('legacy/sql')`).Scan(&body))
	requireLegacyDefaults(t, body, "e0")

	for _, f := range []string{"cloudevents", "cloudevents-binary"} {
		got := make(chan *event.Event, 1)
		rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, h hookRequest) {
			e, err := cehttp.NewEventFromHTTPRequest(&http.Request{Header: h.header, Body: io.NopCloser(bytes.NewReader(h.body))})
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			got <- e
		})
		sub := map[string]string{"cloudevents": "structured", "cloudevents-binary": "binary"}[f]
		_, _ = putPush(t, env, spath("legacy", sub), fast(map[string]any{"push": map[string]any{"url": rc.url(), "format": f}}),
			http.StatusOK, subscriptionKeys)
		select {
		case e := <-got:
			require.Equal(t, "e0", e.ID(), f)
			require.Equal(t, "legacy.created", e.Type(), f)
			require.Equal(t, "/ferry/topics/legacy", e.Source(), f)
			require.Equal(t, legacyPublishedAt, e.Time().UTC(), f)
			require.Equal(t, "application/json", e.DataContentType(), f)
			require.Equal(t, "K-e0", e.Extensions()["partitionkey"], f)
			require.JSONEq(t, `{"n": 0, "s": "é"}`, string(e.Data()), f)
			require.NoError(t, e.Validate(), f)
		case <-time.After(waitFor):
			t.Fatalf("%s: no push of the legacy delivery (%d requests)", f, len(rc.requests()))
		}
	}
}

// requireLegacyRESTReads reads the legacy rows over REST, each answer
// checked against the spec by env.Do.
func requireLegacyRESTReads(t *testing.T, env *ferrytest.Env) {
	t.Helper()
	var page struct {
		Messages []struct {
			Event json.RawMessage `json:"event"`
		} `json:"messages"`
	}
	r := env.Do("GET", spath("legacy", "pull", "/messages"), nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r.JSON(t, &page)
	require.Len(t, page.Messages, 1)
	requireLegacyDefaults(t, page.Messages[0].Event, "e0")

	r = env.Do("GET", spath("legacy", "pull", "/dead-letters"), nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r.JSON(t, &page)
	require.Len(t, page.Messages, 1)
	requireLegacyDefaults(t, page.Messages[0].Event, "e1")

	r = env.Do("POST", spath("legacy", "pull", "/receive"), map[string]any{})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r.JSON(t, &page)
	require.Len(t, page.Messages, 1)
	requireLegacyDefaults(t, page.Messages[0].Event, "e0")

	var read struct {
		Events []json.RawMessage `json:"events"`
	}
	r = env.Do("GET", tpath("legacy", "/events")+"?partition=0", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r.JSON(t, &read)
	require.Len(t, read.Events, 1)
	requireLegacyDefaults(t, read.Events[0], "e0")
	r = env.Do("POST", gpath("legacy", "g", "/poll"), map[string]any{"consumer": "m", "start": "earliest"})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r.JSON(t, &read)
	require.Len(t, read.Events, 1, "%s", r.Body)
	requireLegacyDefaults(t, read.Events[0], "e0")
	r = env.DoWith("GET", tpath("legacy", "/events")+"?partition=0", nil, http.Header{
		"Authorization": {"Bearer " + ferrytest.AdminKey}, "Accept": {event.ApplicationCloudEventsBatchJSON}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var evs []event.Event
	require.NoError(t, json.Unmarshal(r.Body, &evs))
	require.Len(t, evs, 1)
	require.Equal(t, "/ferry/topics/legacy", evs[0].Source())
	require.Equal(t, legacyPublishedAt, evs[0].Time().UTC())
}

// requireLegacyDefaults requires of an event (JSON, as a delivery or a
// read gives it) the legacy row's id and the defaults of a plain JSON
// event.
func requireLegacyDefaults(t *testing.T, raw []byte, id string) {
	t.Helper()
	var ev struct {
		ID, Source, Time, DataContentType string
		Extensions                        map[string]any
		Key                               string
	}
	require.NoError(t, json.Unmarshal(raw, &ev), "%s", raw)
	require.Equal(t, id, ev.ID, "%s", raw)
	require.Equal(t, "/ferry/topics/legacy", ev.Source, "%s", raw)
	require.Equal(t, legacyTime, ev.Time, "%s", raw)
	require.Equal(t, "application/json", ev.DataContentType, "%s", raw)
	require.NotNil(t, ev.Extensions, "%s", raw)
	require.Equal(t, "K-"+id, ev.Key)
}
