package store

import (
	"context"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// SQLWakeKey is the NOTIFY payload of the SQL API's commits. A NOTIFY
// costs its transaction a lock that every notifying commit in the cluster
// takes in turn and holds until its commit record is on disk, so one
// NOTIFY per application transaction would line their commits up one
// behind the other. So a SQL API function only records what its
// transaction must wake (ferry.wake_at_commit, migration 000009); at
// commit the keys go into ferry.sql_wakes with the time, and the
// transaction NOTIFYs this key only if no commit did in the last 10 ms. Every instance that hears
// it reads the keys woken since its last read (readSQLWakes), and again a
// few times in the next few windows, which finds the commits that came
// right after without a NOTIFY of their own. A commit missed by all of
// that (its commit took longer than the trailing reads) is found by the
// waiters' own fallback polls.
const SQLWakeKey int64 = math.MinInt64 + 3

// sqlWakeTrailing is how many reads follow the one a NOTIFY starts, each
// after twice the wait of the one before (the first after the Notifier's
// window): with the default window, for about 1.3 s.
const sqlWakeTrailing = 7

// sqlWakeLookBack is how many transaction ids before its snapshot's xmin
// a first read looks (it has no earlier read to start from).
const sqlWakeLookBack = 10000

// sqlWakeReadLimit bounds the rows one read takes; more (a read long
// after a burst of SQL API commits to many queues) are read by the next.
const sqlWakeReadLimit = 10000

// sqlWakesSince reads the keys woken by SQL API commits of transactions
// not yet finished when the read that returned from began (its snapshot's
// xmin; 0: the first read, which looks back sqlWakeLookBack transaction
// ids), and this read's xmin. A transaction older than a snapshot's xmin
// had finished when that snapshot was taken, so what it wrote was seen by
// that read; anything newer is read again. In xact order with a limit:
// the index's range, whatever plan a generic parameter gets.
func sqlWakesSince(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, from uint64) ([]int64, uint64, error) {
	rows, err := db.Query(ctx, `/* ferry:sql_wakes_read */
		WITH s AS (SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin)
		SELECT s.xmin, w.key FROM s
		LEFT JOIN LATERAL (
			SELECT key FROM ferry.sql_wakes
			WHERE xact >= (CASE WHEN $1::bigint > 0 THEN $1::bigint ELSE greatest(s.xmin - $2, 0) END)::text::xid8
			ORDER BY xact LIMIT $3
		) w ON true`, int64(from), sqlWakeLookBack, sqlWakeReadLimit)
	if err != nil {
		return nil, 0, interpretError("sql wakes", err)
	}
	defer rows.Close()
	var (
		keys []int64
		xmin int64
	)
	for rows.Next() {
		var key *int64
		if err := rows.Scan(&xmin, &key); err != nil {
			return nil, 0, interpretError("sql wakes", err)
		}
		if key != nil {
			keys = append(keys, *key)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys), uint64(xmin), interpretError("sql wakes", rows.Err())
}

// kickSQLWakes asks readSQLWakes for a read now and its trailing reads.
func (n *Notifier) kickSQLWakes() {
	select {
	case n.sqlKick <- struct{}{}:
	default:
	}
}

// readSQLWakes wakes, for each NOTIFY of SQLWakeKey, the keys the SQL
// API's commits recorded: at once and in sqlWakeTrailing reads after. It
// reads on a connection of its own, made when first needed and again
// after an error (with the pool's settings): on a pool connection its
// reads would come between the statements of a request.
func (n *Notifier) readSQLWakes(ctx context.Context) {
	var (
		conn *pgx.Conn
		from uint64
		left int
		wait = n.window
	)
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.sqlKick:
			left, wait = sqlWakeTrailing, n.window
		case <-timer.C:
		}
		var (
			keys []int64
			xmin uint64
			err  error
		)
		if conn == nil {
			conn, err = pgx.ConnectConfig(ctx, n.pool.Config().ConnConfig.Copy())
		}
		if err == nil {
			keys, xmin, err = sqlWakesSince(ctx, conn, from)
		}
		if err != nil {
			if ctx.Err() == nil {
				n.log.Warn("reading SQL API wakes failed; waiters fall back to polling", "error", err)
			}
			if conn != nil {
				_ = conn.Close(context.Background())
				conn = nil
			}
			continue
		}
		from = xmin
		if len(keys) > 0 {
			n.wake(keys)
			n.tell(keys)
		}
		if left > 0 {
			left--
			timer.Reset(wait)
			wait *= 2
		}
	}
}

// withoutSQLWake removes SQLWakeKey from ids, and reports whether it was
// there.
func withoutSQLWake(ids []int64) ([]int64, bool) {
	i := slices.Index(ids, SQLWakeKey)
	if i < 0 {
		return ids, false
	}
	return slices.Delete(ids, i, i+1), true
}
