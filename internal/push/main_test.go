package push_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
	"github.com/ferry-mq/ferry/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// send sends n messages to queue, each with its own dedup id.
func send(t *testing.T, pool *pgxpool.Pool, queue string, n int) {
	t.Helper()
	s := store.NewSender(pool, store.SenderConfig{Workers: 1})
	defer s.Close()
	msgs := make([]store.SendMessage, n)
	for i := range msgs {
		msgs[i] = store.SendMessage{Body: json.RawMessage(`{"n":1}`), DedupID: queue + string(rune('a'+i%26)) + string(rune('a'+i/26))}
	}
	_, _, err := s.Send(context.Background(), queue, msgs)
	require.NoError(t, err)
}

// count runs sql, which returns one number.
func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}
