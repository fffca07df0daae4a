package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// TestListPagesAreBounded: each list reads about one page of rows from
// its index, also deep into a long list and with the generic plan a pooled
// connection may have cached, never the whole table (keyset pagination).
// The per-transaction scan counters of the table and its indexes tell what
// a statement read, whichever plan ran.
func TestListPagesAreBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 5000
	tp := e.topic("t", store.TopicPatch{})
	for _, stmt := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO ferry.queues (name) SELECT format('q-%s', lpad(i::text, 5, '0')) FROM generate_series(1, $1) i`, []any{n}},
		{`INSERT INTO ferry.queues (name, topic_id) SELECT format('s-%s', lpad(i::text, 5, '0')), $2 FROM generate_series(1, $1) i`, []any{n, tp.ID}},
		{`INSERT INTO ferry.topics (name) SELECT format('t-%s', lpad(i::text, 5, '0')) FROM generate_series(1, $1) i`, []any{n}},
		{`INSERT INTO ferry.consumer_groups (topic_id, name) SELECT $2, format('g-%s', lpad(i::text, 5, '0')) FROM generate_series(1, $1) i`, []any{n, tp.ID}},
	} {
		_, err := e.pool.Exec(e.ctx, stmt.sql, stmt.args...)
		require.NoError(t, err)
	}
	_, err := e.pool.Exec(e.ctx, `ANALYZE ferry.queues, ferry.topics, ferry.consumer_groups`)
	require.NoError(t, err)

	conn, err := e.pool.Acquire(e.ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(e.ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)

	const limit = 20
	for _, tt := range []struct {
		table, prefix string
		list          func(ctx context.Context, db store.DBTX, after string) (int, bool, error)
	}{
		{"ferry.queues", "q", func(ctx context.Context, db store.DBTX, after string) (int, bool, error) {
			qs, more, err := store.QueueList(ctx, db, store.QueueListParams{After: after, Limit: limit})
			return len(qs), more, err
		}},
		{"ferry.queues", "s", func(ctx context.Context, db store.DBTX, after string) (int, bool, error) {
			ss, more, err := store.SubscriptionList(ctx, db, store.SubscriptionListParams{TopicID: tp.ID, After: after, Limit: limit})
			return len(ss), more, err
		}},
		{"ferry.topics", "t", func(ctx context.Context, db store.DBTX, after string) (int, bool, error) {
			ts, more, err := store.TopicList(ctx, db, store.TopicListParams{After: after, Limit: limit})
			return len(ts), more, err
		}},
		{"ferry.consumer_groups", "g", func(ctx context.Context, db store.DBTX, after string) (int, bool, error) {
			gs, more, err := store.ConsumerGroupList(ctx, db, store.ConsumerGroupListParams{TopicID: tp.ID, After: after, Limit: limit})
			return len(gs), more, err
		}},
	} {
		// From the start, the middle and near the end ("" sorts before
		// every name).
		for _, after := range []string{"", tt.prefix + "-02500", tt.prefix + "-04980"} {
			err := pgx.BeginFunc(e.ctx, conn, func(tx pgx.Tx) error {
				before, err := readCount(e.ctx, tx, tt.table)
				if err != nil {
					return err
				}
				got, _, err := tt.list(e.ctx, tx, after)
				if err != nil {
					return err
				}
				require.Equal(t, limit, got, "%s after %q", tt.table, after)
				read, err := readCount(e.ctx, tx, tt.table)
				require.LessOrEqual(t, read-before, int64(2*limit), "%s after %q: rows and index entries read", tt.table, after)
				return err
			})
			require.NoError(t, err)
		}
	}
}

// readCount is how many rows of the table and entries of its indexes
// the session has read (its counters not yet flushed included: take a
// difference).
func readCount(ctx context.Context, tx pgx.Tx, table string) (int64, error) {
	var n int64
	err := tx.QueryRow(ctx, `
		SELECT pg_stat_get_xact_tuples_returned($1::regclass)
			+ coalesce((SELECT sum(pg_stat_get_xact_tuples_returned(indexrelid))
				FROM pg_index WHERE indrelid = $1::regclass), 0)::bigint`, table).Scan(&n)
	return n, err
}

// TestListPages pages through each list: every name once, in order, more
// false on the last page only; Limit 0 lists everything at once.
func TestListPages(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	tp := e.topic("t", store.TopicPatch{})
	other := e.topic("u", store.TopicPatch{})
	var want []string
	for i := range 7 {
		want = append(want, fmt.Sprintf("n%d", i))
	}
	for _, name := range []string{"n3", "n0", "n6", "n1", "n5", "n2", "n4"} {
		e.queue(name, store.QueuePatch{})
		e.topic("t"+name, store.TopicPatch{})
		for _, topicID := range []int64{tp.ID, other.ID} {
			_, err := e.db.Exec(e.ctx, `INSERT INTO ferry.queues (name, topic_id) VALUES ($1, $2)`, name, topicID)
			require.NoError(t, err)
			_, err = e.db.Exec(e.ctx, `INSERT INTO ferry.consumer_groups (topic_id, name) VALUES ($1, $2)`, topicID, name)
			require.NoError(t, err)
		}
	}
	lists := map[string]func(after string, limit int) ([]string, bool){
		"queues": func(after string, limit int) ([]string, bool) {
			qs, more, err := store.QueueList(e.ctx, e.db, store.QueueListParams{After: after, Limit: limit})
			require.NoError(t, err)
			names := make([]string, len(qs))
			for i, q := range qs {
				names[i] = q.Name
			}
			return names, more
		},
		"topics": func(after string, limit int) ([]string, bool) {
			ts, more, err := store.TopicList(e.ctx, e.db, store.TopicListParams{After: after, Limit: limit})
			require.NoError(t, err)
			var names []string
			for _, x := range ts {
				if x.Name != "t" && x.Name != "u" {
					names = append(names, x.Name[1:])
				}
			}
			return names, more
		},
		"subscriptions": func(after string, limit int) ([]string, bool) {
			ss, more, err := store.SubscriptionList(e.ctx, e.db, store.SubscriptionListParams{TopicID: tp.ID, After: after, Limit: limit})
			require.NoError(t, err)
			names := make([]string, len(ss))
			for i, s := range ss {
				require.Equal(t, tp.ID, s.TopicID)
				names[i] = s.Name
			}
			return names, more
		},
		"groups": func(after string, limit int) ([]string, bool) {
			names, more, err := store.ConsumerGroupList(e.ctx, e.db, store.ConsumerGroupListParams{TopicID: tp.ID, After: after, Limit: limit})
			require.NoError(t, err)
			return names, more
		},
	}
	for kind, list := range lists {
		all, more := list("", 0)
		require.False(t, more, kind)
		require.Equal(t, want, all, kind)
		if kind == "topics" {
			continue // "t" and "u" are listed too: the paging below is for names alone
		}
		for limit := 1; limit <= 8; limit++ {
			var got []string
			after := ""
			for {
				page, more := list(after, limit)
				require.LessOrEqual(t, len(page), limit)
				got = append(got, page...)
				if !more {
					break
				}
				require.Len(t, page, limit, "%s: a page before the last is full", kind)
				after = page[len(page)-1]
			}
			require.Equal(t, want, got, "%s limit %d", kind, limit)
		}
	}
}
