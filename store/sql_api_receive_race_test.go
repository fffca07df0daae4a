package store_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// Consumers racing for a queue's head through the SQL API, each receive
// and ack in its own transaction, with a snapshot held by another
// connection (so claimed rows, moved to their lease's partition, stay
// behind as dead versions the next claims meet): no call fails (a claim
// that met a row moved under it, 40001, runs again inside ferry.receive)
// and each message is received once.
func TestSQLReceiveRacingForTheHead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("race", store.QueuePatch{})
	const total = 2000
	for i := 0; i < total; i += 100 {
		batch := make([]store.SendMessage, 100)
		for j := range batch {
			batch[j] = msg(i + j)
		}
		e.send(q, batch...)
	}
	held, err := e.pool.BeginTx(e.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = held.Rollback(e.ctx) }()
	_, err = held.Exec(e.ctx, `SELECT count(*) FROM ferry.queues`)
	require.NoError(t, err)
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
		wg   sync.WaitGroup
	)
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for {
				done := false
				err := pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
					rows, err := tx.Query(e.ctx, `SELECT id, receipt FROM ferry.receive('race', 10, 60)`)
					if err != nil {
						return err
					}
					var ids, receipts []string
					for rows.Next() {
						var id, receipt string
						if err := rows.Scan(&id, &receipt); err != nil {
							return err
						}
						ids, receipts = append(ids, id), append(receipts, receipt)
					}
					if err := rows.Err(); err != nil {
						return err
					}
					if len(ids) == 0 {
						done = true
						return nil
					}
					mu.Lock()
					for _, id := range ids {
						if seen[id] {
							errs <- fmt.Errorf("message %s received twice", id)
						}
						seen[id] = true
					}
					mu.Unlock()
					var acked int
					if err := tx.QueryRow(e.ctx, `SELECT count(*) FILTER (WHERE status = 'ok') FROM ferry.ack('race', $1)`, receipts).Scan(&acked); err != nil {
						return err
					}
					if acked != len(receipts) {
						return fmt.Errorf("%d of %d acks applied", acked, len(receipts))
					}
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
				if done {
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, seen, total)
	require.Zero(t, e.live(q))
}

// An ack, nack or extend through the SQL API that waited for a message's
// row while another transaction's extend moved it to another partition of
// ferry.messages (its new lease is due in another slot of the ring) runs
// again on the moved row inside the call, rather than fail with 40001.
func TestSQLSettleRetriesMovedRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("moved", store.QueuePatch{})
	for _, op := range []string{
		`SELECT status FROM ferry.ack('moved', ARRAY[$1])`,
		`SELECT status FROM ferry.nack('moved', ARRAY[$1])`,
		`SELECT status FROM ferry.extend('moved', ARRAY[$1], 60)`,
	} {
		e.send(q, msg(1))
		// Received with a lease beyond the ring's horizon (its FAR
		// partition), and committed: the receipt is free to settle.
		var receipt string
		require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT receipt FROM ferry.receive('moved', 1, 60)`).Scan(&receipt))
		mover, err := e.pool.Begin(e.ctx)
		require.NoError(t, err)
		var status string
		require.NoError(t, mover.QueryRow(e.ctx, `SELECT status FROM ferry.extend('moved', ARRAY[$1], 10)`, receipt).Scan(&status))
		require.Equal(t, "ok", status)
		// Released at the end however the test ends (the pool's Close
		// waits for it).
		conn, err := e.pool.Acquire(e.ctx)
		require.NoError(t, err)
		defer conn.Release()
		defer func() { _ = mover.Rollback(e.ctx) }()
		pid := conn.Conn().PgConn().PID()
		done := make(chan error, 1)
		go func() {
			done <- pgx.BeginFunc(e.ctx, conn, func(tx pgx.Tx) error {
				if err := tx.QueryRow(e.ctx, op, receipt).Scan(&status); err != nil {
					return err
				}
				if status != "ok" {
					return fmt.Errorf("%s: %s", op, status)
				}
				return nil
			})
		}()
		// The call waits for the mover's row lock; then the mover commits.
		for {
			select {
			case err := <-done:
				t.Fatalf("%s ended without waiting for the mover: %v", op, err)
			default:
			}
			var waiting bool
			require.NoError(t, e.pool.QueryRow(e.ctx,
				`SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting))
			if waiting {
				break
			}
		}
		require.NoError(t, mover.Commit(e.ctx))
		require.NoError(t, <-done, op)
		_, err = e.pool.Exec(e.ctx, `DELETE FROM ferry.messages WHERE queue_id = $1`, q.ID)
		require.NoError(t, err)
	}
}

// ferry.retry_pause, the SQL API's retry loops' one wait and budget: an
// attempt before the 10th returns (after its pause), the 10th raises
// serialization_failure (40001) again with the failure's message, so the
// caller's statement ends as the failure itself would have.
func TestSQLRetryPauseBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, attempt := range []int{1, 9} {
		_, err := e.pool.Exec(e.ctx, `SELECT ferry.retry_pause($1, 'moved')`, attempt)
		require.NoError(t, err, "attempt %d", attempt)
	}
	_, err := e.pool.Exec(e.ctx, `SELECT ferry.retry_pause(10, 'tuple to be locked was already moved')`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "40001", pgErr.Code)
	require.Equal(t, "tuple to be locked was already moved", pgErr.Message)
}
