package store

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
)

// TestCloudAttrsGoAndSQLAgree: a plain JSON event's CloudEvents attributes
// are written by Go (reads, polls: DefaultCloudAttrs) and by SQL (a
// delivery's body: ceBodySQL); both must give the same source, time text
// and content type, or a push and a read of one event would disagree.
// A stored CloudEvent's attributes pass through ceBodySQL as they are,
// with extensions {} when it has none.
func TestCloudAttrsGoAndSQLAgree(t *testing.T) {
	t.Parallel()
	tx := pgtest.NewTx(t)
	ctx := context.Background()
	at := time.Date(2026, 3, 4, 5, 6, 7, 890123000, time.FixedZone("x", 3600))
	want := DefaultCloudAttrs(DefaultCloudSource("orders"), at)
	require.Equal(t, "/ferry/topics/orders", want.Source)
	require.Equal(t, "2026-03-04T04:06:07.890123Z", *want.Time, "UTC with microseconds")
	require.Equal(t, "application/json", *want.DataContentType)

	var plain, stored []byte
	err := tx.QueryRow(ctx, `SELECT `+ceBodySQL("NULL::jsonb", "$1::timestamptz", "$2::text")+`,
		`+ceBodySQL("$3::jsonb", "$1::timestamptz", "$2::text"),
		at, want.Source, `{"source":"/app","subject":"s"}`).Scan(&plain, &stored)
	require.NoError(t, err)

	var got CloudAttrs
	require.NoError(t, json.Unmarshal(plain, &got))
	require.Equal(t, want.Source, got.Source)
	require.Equal(t, *want.Time, *got.Time, "Go's layout and to_char write one text")
	require.Equal(t, *want.DataContentType, *got.DataContentType)
	require.JSONEq(t, `{"source":"/ferry/topics/orders","time":"2026-03-04T04:06:07.890123Z",
		"datacontenttype":"application/json","extensions":{}}`, string(plain))
	require.JSONEq(t, `{"source":"/app","subject":"s","extensions":{}}`, string(stored),
		"a stored CloudEvent keeps its own attributes, and no defaults are added")
}

// TestCloudDeliveryGoAndSQLAgree: a delivery written before CloudEvents
// support gets the same defaults from Go (store.CloudDelivery: REST and
// push) and from SQL (ferry.event_cloud_defaults: ferry.receive); a
// delivery that has a source, even one whose data names a "source" too,
// is left as it is, and so is what is not such an event. Only a member
// of the event object itself counts as its source.
func TestCloudDeliveryGoAndSQLAgree(t *testing.T) {
	t.Parallel()
	tx := pgtest.NewTx(t)
	ctx := context.Background()
	const legacy = `{"id": "e", "key": null, "data": {"source": "not the event's", "x": ["source", {"source": 1}]}, ` +
		`"type": "t", "offset": 3, "partition": 1, "attributes": {"source": "s"}, "published_at": "2026-03-04T04:06:07.890123Z"}`
	for _, c := range []struct{ body, want string }{
		{legacy, `{"id": "e", "key": null, "data": {"source": "not the event's", "x": ["source", {"source": 1}]}, "type": "t",
			"offset": 3, "partition": 1, "attributes": {"source": "s"}, "published_at": "2026-03-04T04:06:07.890123Z",
			"source": "/ferry/topics/orders", "time": "2026-03-04T04:06:07.890123Z", "datacontenttype": "application/json", "extensions": {}}`},
		{`{"id": "e", "source": "/app", "published_at": "2026-03-04T04:06:07.890123Z", "extensions": {"k": 1}}`, ""},
		{`{"id": "e", "data": "\"source\": 1", "published_at": "2026-03-04T04:06:07Z"}`,
			`{"id": "e", "data": "\"source\": 1", "published_at": "2026-03-04T04:06:07Z", "source": "/ferry/topics/orders",
			"time": "2026-03-04T04:06:07.000000Z", "datacontenttype": "application/json", "extensions": {}}`},
		{`{"id": "e"}`, ""},
		{`[1, "source"]`, ""},
	} {
		want := c.want
		if want == "" {
			want = c.body
		}
		goBody := CloudDelivery(json.RawMessage(c.body), "orders")
		require.JSONEq(t, want, string(goBody), "Go: %s", c.body)
		var sqlBody string
		require.NoError(t, tx.QueryRow(ctx, `SELECT ferry.event_cloud_defaults($1::jsonb, 'orders')::text`, c.body).Scan(&sqlBody))
		require.JSONEq(t, want, sqlBody, "SQL: %s", c.body)
	}
}
