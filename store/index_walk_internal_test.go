package store

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
)

// walkProbe creates ferry.table (a name of the test's own: parallel tests
// share the database) of the shape walks read: (queue_id, id) its primary
// key, an index on (queue_id, at); queue 1 holds ids 2, 4, …, 4000, with
// at one of ten instants from 2026-01-01, queue 2 ids 1, 3, 5.
func walkProbe(t *testing.T, table string) (pgx.Tx, time.Time) {
	t.Helper()
	tx := pgtest.NewTx(t)
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	_, err := tx.Exec(ctx, strings.ReplaceAll(`
		CREATE TABLE ferry.walk_probe (queue_id bigint, id bigint, at timestamptz NOT NULL, grp text,
			PRIMARY KEY (queue_id, id));
		CREATE INDEX ON ferry.walk_probe (queue_id, at);
		INSERT INTO ferry.walk_probe
			SELECT 1, 2*i, '2026-01-01 00:00:00+00'::timestamptz + (i % 10) * interval '1 minute', 'g' || (i % 3) FROM generate_series(1, 2000) i;
		INSERT INTO ferry.walk_probe VALUES (2, 1, '2026-01-01 00:00:00+00', 'x'), (2, 3, '2026-01-01 00:00:00+00', 'x'), (2, 5, '2026-01-01 00:00:00+00', 'x');
		ANALYZE ferry.walk_probe`, "walk_probe", table))
	require.NoError(t, err)
	return tx, t0
}

// TestWalkKeys: the walk reads one queue's keys in ascending order after
// the given start, within its extra condition, with the extra columns,
// and its plan sorts nothing (each step is one index probe).
func TestWalkKeys(t *testing.T) {
	t.Parallel()
	tx, _ := walkProbe(t, "walk_keys_probe")
	ctx := context.Background()
	keys := func(after, cond string, n int, args ...any) []int64 {
		sql := `WITH RECURSIVE ` + walkKeys("walk_keys_probe", "id", after, cond, ", x.grp") +
			` SELECT id FROM walk LIMIT ` + strconv.Itoa(n)
		rows, err := tx.Query(ctx, sql, args...)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		return got
	}
	require.Equal(t, []int64{2, 4, 6}, keys("0", "", 3, 1))
	require.Equal(t, []int64{12, 14}, keys("$2::bigint", "", 2, 1, 10))
	require.Equal(t, []int64{3998, 4000}, keys("$2::bigint", "", 5, 1, 3996), "the walk ends with the queue")
	require.Equal(t, []int64{6, 8}, keys("$2::bigint", "AND x.id <= $3", 10, 1, 4, 8), "the condition bounds it")
	require.Equal(t, []int64{1, 3, 5}, keys("0", "", 10, 2), "queue 2's keys only")

	var plan strings.Builder
	rows, err := tx.Query(ctx, `EXPLAIN WITH RECURSIVE `+walkKeys("walk_keys_probe", "id", "0", "", "")+` SELECT id FROM walk LIMIT 3`, int64(1))
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan.WriteString(strings.Join(lines, "\n"))
	require.NotContains(t, plan.String(), "Sort", "%s", plan.String())
	require.NotContains(t, plan.String(), "Bitmap", "%s", plan.String())
}

// TestWalkValues: the walk reads the distinct values of a column in
// ascending order, within its scope, and below its bound.
func TestWalkValues(t *testing.T) {
	t.Parallel()
	tx, t0 := walkProbe(t, "walk_values_probe")
	ctx := context.Background()
	values := func(scope, below string, args ...any) []time.Time {
		rows, err := tx.Query(ctx, `WITH RECURSIVE `+walkValues("walk_values_probe", "at", scope, below)+` SELECT v FROM walk`, args...)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
		require.NoError(t, err)
		return got
	}
	var want []time.Time
	for i := range 10 {
		want = append(want, t0.Add(time.Duration(i)*time.Minute))
	}
	requireInstants(t, want, values("x.queue_id = $1 AND", "'infinity'", int64(1)))
	requireInstants(t, want[:4], values("x.queue_id = $1 AND", "$2", int64(1), t0.Add(4*time.Minute)), "below the bound only")
	requireInstants(t, want[:1], values("x.queue_id = $1 AND", "'infinity'", int64(2)), "queue 2's one value")
	requireInstants(t, want, values("", "'infinity'"), "no scope: every queue's")
}

func requireInstants(t *testing.T, want, got []time.Time, msg ...any) {
	t.Helper()
	require.Len(t, got, len(want), msg...)
	for i := range want {
		require.True(t, want[i].Equal(got[i]), "%v != %v %v", want[i], got[i], msg)
	}
}
