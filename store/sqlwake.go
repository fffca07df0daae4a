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

// sqlWakeMargin is how far before its previous read a read of
// ferry.sql_wakes starts: a row's time is taken just before its
// transaction commits, so a commit may become visible a little after a
// read that began later than its time.
const sqlWakeMargin = 100 * time.Millisecond

// sqlWakeTrailing is how many reads follow the one a NOTIFY starts, each
// after twice the wait of the one before (the first after the Notifier's
// window).
const sqlWakeTrailing = 5

// sqlWakesSince reads the keys woken by SQL API commits since a read that
// began at since (minus the margin; nil, or longer ago than a second: a
// second before now, as a NOTIFY comes within milliseconds of the commits
// it is for), and the database's time as this read began.
func sqlWakesSince(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, since *time.Time) ([]int64, time.Time, error) {
	var (
		keys []int64
		at   time.Time
	)
	err := db.QueryRow(ctx, `/* ferry:sql_wakes_read */
		SELECT clock_timestamp(), coalesce(array_agg(DISTINCT key), '{}') FROM ferry.sql_wakes
		WHERE at >= greatest($1, clock_timestamp() - interval '1 second') - $2 * interval '1 millisecond'`,
		since, sqlWakeMargin.Milliseconds()).Scan(&at, &keys)
	return keys, at, interpretError("sql wakes", err)
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
		conn  *pgx.Conn
		since *time.Time
		left  int
		wait  = n.window
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
			at   time.Time
			err  error
		)
		if conn == nil {
			conn, err = pgx.ConnectConfig(ctx, n.pool.Config().ConnConfig.Copy())
		}
		if err == nil {
			keys, at, err = sqlWakesSince(ctx, conn, since)
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
		since = &at
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
