package definitions_test

import (
	"context"
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
	"github.com/ferry-mq/ferry/migrations"
)

// The one JSON-kind, size and traceparent rule (validation.sql) answers
// as each of the two helpers it replaced did (send_json_kind and
// publish_kind, send_compact_size, send_valid_traceparent): sends and
// publishes refuse what they refused, in the same words, and measure
// bodies as they did. Migration 000015 dropped the helpers; the test
// creates them from their landed text (that migration's down) in a
// schema of its own, inside its transaction.
func TestFoldedRulesAgree(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := pgtest.NewTx(t)
	old, err := fs.ReadFile(migrations.Files(), "000015_drop_folded_helpers.down.sql")
	require.NoError(t, err)
	require.Contains(t, string(old), "CREATE FUNCTION ferry.send_json_kind(")
	_, err = tx.Exec(ctx, "CREATE SCHEMA folded_old; "+strings.ReplaceAll(string(old), "ferry.", "folded_old."))
	require.NoError(t, err)
	var differ int
	err = tx.QueryRow(ctx, `
		WITH v AS (
			SELECT (SELECT jsonb_agg(CASE (random() * 6)::int
					WHEN 0 THEN to_jsonb(i) WHEN 1 THEN to_jsonb('s ' || chr(32 + (random() * 90)::int) || E', : "\\')
					WHEN 2 THEN jsonb_build_object('a b', i, 'c', jsonb_build_array(1, '{}'::jsonb, '[]'::jsonb))
					WHEN 3 THEN 'null'::jsonb WHEN 4 THEN to_jsonb(random() > 0.5)
					ELSE jsonb_build_array(jsonb_build_object(), i * 1.5) END)
				FROM generate_series(1, 1 + g % 40) i) -> (g % 3) AS j
			FROM generate_series(1, 2000) g
		)
		SELECT count(*) FROM v
		WHERE ferry.json_kind(j, true) IS DISTINCT FROM folded_old.send_json_kind(j)
			OR ferry.json_kind(j) IS DISTINCT FROM folded_old.publish_kind(j)
			OR ferry.json_compact_size(j) IS DISTINCT FROM folded_old.send_compact_size(j)`).Scan(&differ)
	require.NoError(t, err)
	require.Zero(t, differ, "values whose kind or size the folded rules answer differently")

	var kinds []string
	require.NoError(t, tx.QueryRow(ctx, `SELECT ARRAY[ferry.json_kind('1.5'), ferry.json_kind('1.5', true),
		ferry.json_kind('true'), ferry.json_kind('"s"'), ferry.json_kind('[]'), ferry.json_kind('{}'), ferry.json_kind('null')]`).Scan(&kinds))
	require.Equal(t, []string{"number", "number 1.5", "bool", "string", "array", "object", "null"}, kinds)

	tps := []string{
		"", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-é",
	}
	var same []bool
	require.NoError(t, tx.QueryRow(ctx, `SELECT array_agg(ferry.valid_traceparent(v) = folded_old.send_valid_traceparent(v) ORDER BY o)
		FROM unnest($1::text[]) WITH ORDINALITY AS t(v, o)`, tps).Scan(&same))
	for i, s := range same {
		require.True(t, s, "traceparent %q", tps[i])
	}
}

// After the migrations and the definitions (migration 000015), the four
// replaced helpers are gone and no function of the ferry schema names
// them.
func TestFoldedHelpersGone(t *testing.T) {
	t.Parallel()
	tx := pgtest.NewTx(t)
	var named []string
	require.NoError(t, tx.QueryRow(context.Background(), `
		SELECT coalesce(array_agg(p.oid::regprocedure::text ORDER BY 1), '{}') FROM pg_proc p
		WHERE p.pronamespace = 'ferry'::regnamespace
			AND (p.proname IN ('send_json_kind', 'publish_kind', 'send_compact_size', 'send_valid_traceparent')
				OR p.prosrc ~ '\m(send_json_kind|publish_kind|send_compact_size|send_valid_traceparent)\M')`).Scan(&named))
	require.Empty(t, named)
}
