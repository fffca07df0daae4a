package store

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
)

// silentPool is a pool on a server that accepts connections and never
// answers, as a primary whose machine vanished (packets dropped) looks
// until connect_timeout; attempts counts the connections it was offered.
func silentPool(t *testing.T) (pool *pgxpool.Pool, attempts *atomic.Int64) {
	t.Helper()
	addr, attempts := pgtest.SilentHost(t)
	cfg, err := pgxpool.ParseConfig(fmt.Sprintf("postgres://ferry@%s/ferry?sslmode=disable&connect_timeout=1", addr))
	require.NoError(t, err)
	pool, err = pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, attempts
}

// TestLostConnectionFailsTheWholeBatch: a merged send or publish whose
// connection cannot be made is not split and written again request by
// request (each attempt costs a connect timeout per host, so a batch of
// 50 would hold a worker for minutes): every request of the batch fails
// at once with ErrUnavailable, after one connection attempt.
func TestLostConnectionFailsTheWholeBatch(t *testing.T) {
	t.Parallel()
	const n = 6
	t.Run("Sender", func(t *testing.T) {
		t.Parallel()
		pool, attempts := silentPool(t)
		s := NewSender(pool, SenderConfig{Workers: 1})
		defer s.Close()
		batch := make([]*sendRequest, n)
		for i := range batch {
			batch[i] = &sendRequest{ctx: context.Background(), queue: "q", done: make(chan struct{}),
				msgs: []SendMessage{{Body: []byte(`{}`)}}}
		}
		begin := time.Now()
		s.write(batch)
		took := time.Since(begin)
		for _, r := range batch {
			<-r.done
			require.ErrorIs(t, r.err, ErrUnavailable)
		}
		require.EqualValues(t, 1, attempts.Load(), "connection attempts (took %v)", took)
	})
	t.Run("Publisher", func(t *testing.T) {
		t.Parallel()
		pool, attempts := silentPool(t)
		p := NewPublisher(pool, PublisherConfig{Workers: 1})
		defer p.Close()
		batch := make([]*publishRequest, n)
		for i := range batch {
			batch[i] = &publishRequest{ctx: context.Background(), topic: Topic{ID: 1, Name: "t", TopicConfig: TopicConfig{Partitions: 1}},
				done: make(chan struct{}), events: []PublishEvent{{ID: NewEventID(), Data: []byte(`{}`)}}}
		}
		begin := time.Now()
		p.write(batch)
		took := time.Since(begin)
		for _, r := range batch {
			<-r.done
			require.True(t, IsUnavailable(r.err), "%v", r.err)
		}
		require.EqualValues(t, 1, attempts.Load(), "connection attempts (took %v)", took)
	})
}
