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
