package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
)

// TestNumericMatchesPostgreSQL asks PostgreSQL's jsonb about numbers around
// every bound of its numeric type and requires pgNumber to say the same,
// and to know how long PostgreSQL writes each one it takes.
func TestNumericMatchesPostgreSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
	require.NoError(t, err)
	defer conn.Close(ctx)

	mantissas := []string{"0", "-0", "0.0", "1", "-1", "10", "9.99", "0.01", "1.00000", "100", "-1.5", "0.000", "123456789"}
	exps := []string{"", "e0", "E+2", "e-3", "e00005"}
	for _, e := range []int64{16377, 16378, 16379, 16382, 16383, 16384, 16385, 131068, 131069, 131070, 131071, 131072, 131073,
		1073741821, 1073741822, 1073741823, 1073741824, 99999999999} {
		exps = append(exps, "e"+strconv.FormatInt(e, 10), "e-"+strconv.FormatInt(e, 10), "e+"+strconv.FormatInt(e, 10))
	}
	for _, m := range mantissas {
		for _, e := range exps {
			num := m + e
			n, end, ok := scanNumber([]byte(num), 0)
			require.True(t, ok && end == len(num), num)
			var length int64
			err := conn.QueryRow(ctx, `SELECT length($1::text::jsonb::text)`, num).Scan(&length)
			var pgErr *pgconn.PgError
			stored := err == nil
			if !stored {
				require.True(t, errors.As(err, &pgErr) && pgErr.Code == "22003", "%s: %v", num, err)
			}
			require.Equal(t, stored, n.fits(), "%s: PostgreSQL stores it: %v", num, stored)
			if stored {
				require.Equal(t, length, n.written(), "%s as PostgreSQL writes it", num)
			}
		}
	}
}

type strictReq struct {
	Name  *string           `json:"name"`
	Items []strictItem      `json:"items"`
	Attrs map[string]string `json:"attrs"`
	Push  rawOf[strictPush] `json:"push"`
}

type strictItem struct {
	Body json.RawMessage `json:"body"`
	N    int             `json:"n"`
}

type strictPush struct {
	URL string `json:"url"`
}

func TestStoredSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		json string
		size int64
	}{
		{`{ "k" : [1, 2] }`, len64(`{"k":[1,2]}`)},
		{`"a \" b"`, 8},
		{`"\u0041"`, 8},
		{`[1e5]`, 8},
		{`[1E+2, -1.5e-3]`, len64(`[1E+2,-0.0015]`)}, // each number as the longer of the two
		{`[1.0e2]`, 7}, // the literal is longer than 100
		{`0e-3`, 5},
	} {
		require.Equal(t, tc.size, storedSize([]byte(tc.json)), tc.json)
	}
}

func len64(s string) int64 { return int64(len(s)) }
