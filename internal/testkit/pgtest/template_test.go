package pgtest

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestSharedTemplate: a template is built once per key however many tests
// ask for it at once, and each database cloned from it starts with what
// build wrote, on its own.
func TestSharedTemplate(t *testing.T) {
	t.Parallel()
	var builds atomic.Int32
	build := func(dbURL string) error {
		builds.Add(1)
		conn, err := pgx.Connect(context.Background(), dbURL)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		_, err = conn.Exec(context.Background(), `CREATE TABLE built (n int); INSERT INTO built VALUES (42)`)
		return err
	}
	for i := range 3 {
		t.Run("clone", func(t *testing.T) {
			t.Parallel()
			tpl := SharedTemplate(t, "template-test", build)
			conn, err := pgx.Connect(context.Background(), NewDatabaseFrom(t, tpl))
			require.NoError(t, err)
			defer conn.Close(context.Background())
			var n int
			require.NoError(t, conn.QueryRow(context.Background(), `SELECT n FROM built`).Scan(&n))
			require.Equal(t, 42, n)
			_, err = conn.Exec(context.Background(), `UPDATE built SET n = $1`, i)
			require.NoError(t, err, "a clone is the test's own")
		})
	}
	t.Cleanup(func() { require.EqualValues(t, 1, builds.Load(), "built once") })
}
