package handlers

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
	"github.com/ferry-mq/ferry/jobs"
	"github.com/ferry-mq/ferry/store"
)

type item struct {
	id   int64
	name string
}

// TestViewPage: a page reads what it shows for its own ids only, in one
// call, and answers in the page's order, naming its last resource; a
// failed read fails the page and one.
func TestViewPage(t *testing.T) {
	t.Parallel()
	var calls [][]int64
	fail := errors.New("read failed")
	v := view[item, int, string]{
		key: func(x item) (int64, string) { return x.id, x.name },
		read: func(_ context.Context, _ store.DBTX, ids []int64) (map[int64]int, error) {
			calls = append(calls, ids)
			if len(ids) == 1 && ids[0] == 0 {
				return nil, fail
			}
			got := map[int64]int{}
			for _, id := range ids {
				got[id] = int(id) * 10
			}
			return got, nil
		},
		out: func(x item, n int) string { return fmt.Sprintf("%s=%d", x.name, n) },
	}
	out, last, err := v.page(context.Background(), nil, []item{{3, "c"}, {1, "a"}, {2, "b"}})
	require.NoError(t, err)
	require.Equal(t, []string{"c=30", "a=10", "b=20"}, out)
	require.Equal(t, "b", last)
	require.Equal(t, [][]int64{{3, 1, 2}}, calls, "one read, of the page's ids in order")

	one, err := v.one(context.Background(), nil, item{5, "e"})
	require.NoError(t, err)
	require.Equal(t, "e=50", one)
	one, err = v.one(context.Background(), nil, item{0, "zero"})
	require.ErrorIs(t, err, fail)
	require.Empty(t, one)
}

// TestDeleteAndClean: the cleanup jobs of what a delete returns are
// inserted in the delete's own transaction (one a queue, one for the
// topic when there is one); a delete that fails leaves neither its writes
// nor any job.
func TestDeleteAndClean(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	r, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	jobsOf := func(kind string) []string {
		rows, err := pool.Query(ctx, `SELECT args::text FROM river_job WHERE kind = $1 ORDER BY id`, kind)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return got
	}
	queueKind, topicKind := (jobs.QueueCleanupArgs{}).Kind(), (jobs.TopicCleanupArgs{}).Kind()

	boom := errors.New("delete refused")
	err = deleteAndClean(ctx, pool, r, func(tx pgx.Tx) ([]int64, int64, error) {
		_, err := tx.Exec(ctx, `CREATE TABLE written_by_delete (x int)`)
		require.NoError(t, err)
		return []int64{1}, 2, boom
	})
	require.ErrorIs(t, err, boom)
	var exists bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass('written_by_delete') IS NOT NULL`).Scan(&exists))
	require.False(t, exists, "the failed delete's writes are rolled back")
	require.Empty(t, jobsOf(queueKind))
	require.Empty(t, jobsOf(topicKind))

	require.NoError(t, deleteAndClean(ctx, pool, r, func(pgx.Tx) ([]int64, int64, error) { return []int64{11, 12}, 0, nil }))
	require.Equal(t, []string{`{"queue_id": 11}`, `{"queue_id": 12}`}, jobsOf(queueKind))
	require.Empty(t, jobsOf(topicKind), "topic 0: none")
	require.NoError(t, deleteAndClean(ctx, pool, r, func(pgx.Tx) ([]int64, int64, error) { return nil, 7, nil }))
	require.Equal(t, []string{`{"topic_id": 7}`}, jobsOf(topicKind))
}
