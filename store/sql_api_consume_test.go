package store_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// TestSQLReceiptCodec holds the SQL API's receipts to store.Receipt's: the
// encoding of every (id, token) is the same string, and ferry.receipt_decode
// accepts exactly what store.ParseReceipt accepts, decoding it alike.
func TestSQLReceiptCodec(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	pairs := [][2]int64{{0, 0}, {1, 2}, {-1, -1}, {math.MaxInt64, math.MinInt64}, {math.MinInt64, math.MaxInt64}, {9007199254740991, 42}}
	for range 200 {
		pairs = append(pairs, [2]int64{rand.Int64(), rand.Int64() - rand.Int64()})
	}
	var candidates []string
	for _, p := range pairs {
		want := store.Receipt{MessageID: p[0], Token: p[1]}.String()
		var got string
		require.NoError(t, e.db.QueryRow(e.ctx, `SELECT ferry.receipt_encode($1, $2)`, p[0], p[1]).Scan(&got))
		require.Equal(t, want, got, "encoding of %v", p)
		candidates = append(candidates, want)
	}
	// Spellings near valid ones: every last character (only four leave
	// no stray bits), padding, line breaks, other alphabets, lengths.
	base := candidates[1]
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+/=é\n "
	for _, c := range alphabet {
		candidates = append(candidates, base[:21]+string(c), string(c)+base[1:], base[:10]+string(c)+base[11:], base+string(c))
	}
	candidates = append(candidates, "", base[:21], base+"==", base+"\n", "\n"+base, strings.ToLower(base), base[:20]+"é",
		"AAAAAAAAAAAAAAAAAAAAAB", "AAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAA", "////////////////////////",
		"ＡAAAAAAAAAAAAAAAAAAAAA")
	accepted := 0
	for _, s := range candidates {
		r, err := store.ParseReceipt(s)
		var id, token *int64
		require.NoError(t, e.db.QueryRow(e.ctx, `SELECT d.id, d.token FROM (SELECT) x LEFT JOIN LATERAL ferry.receipt_decode($1) d ON true`, s).Scan(&id, &token))
		if err != nil {
			require.Nil(t, id, "SQL decoded %q, which store.ParseReceipt refuses", s)
			require.Nil(t, token)
			continue
		}
		accepted++
		require.NotNil(t, id, "SQL refused %q, which store.ParseReceipt accepts", s)
		require.Equal(t, r, store.Receipt{MessageID: *id, Token: *token}, "decoding of %q", s)
	}
	require.Greater(t, accepted, len(pairs), "some spellings besides the encodings were valid")
	require.Less(t, accepted, len(candidates), "some spellings were refused")
}

// TestSQLConsumeRoles: a role with only ferry_consumer receives and acks,
// but cannot read or write Ferry's tables, call the engine's internal
// functions or a producer's function; ferry_producer cannot receive.
func TestSQLConsumeRoles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("roles", store.QueuePatch{})
	e.send(q, msg(1))
	asRole := func(role, sql string, args ...any) error {
		tx, err := e.pool.Begin(e.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(e.ctx) }()
		_, err = tx.Exec(e.ctx, `SET LOCAL ROLE `+role)
		require.NoError(t, err)
		rows, err := tx.Query(e.ctx, sql, args...)
		if err == nil {
			for rows.Next() {
			}
			rows.Close()
			err = rows.Err()
		}
		if err == nil {
			err = tx.Commit(e.ctx)
		}
		return err
	}
	denied := func(err error, what string) {
		t.Helper()
		var pg *pgconn.PgError
		require.True(t, errors.As(err, &pg), "%s: %v", what, err)
		require.Equal(t, "42501", pg.Code, "%s: %s", what, pg.Message)
	}

	// Receive and ack in one transaction as ferry_consumer.
	tx, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(e.ctx, `SET LOCAL ROLE ferry_consumer`)
	require.NoError(t, err)
	var receipt string
	require.NoError(t, tx.QueryRow(e.ctx, `SELECT receipt FROM ferry.receive('roles')`).Scan(&receipt))
	var status string
	require.NoError(t, tx.QueryRow(e.ctx, `SELECT status FROM ferry.ack('roles', ARRAY[$1])`, receipt).Scan(&status))
	require.Equal(t, "ok", status)
	require.NoError(t, tx.QueryRow(e.ctx, `SELECT count(*) FROM ferry.extend('roles', ARRAY[$1], 5)`, receipt).Scan(new(int)))
	require.NoError(t, tx.QueryRow(e.ctx, `SELECT count(*) FROM ferry.nack('roles', ARRAY[$1])`, receipt).Scan(new(int)))
	require.NoError(t, tx.Commit(e.ctx))
	require.Zero(t, e.live(q))

	denied(asRole("ferry_consumer", `SELECT * FROM ferry.messages`), "consumer reads ferry.messages")
	denied(asRole("ferry_consumer", `SELECT * FROM ferry.dead_letters`), "consumer reads ferry.dead_letters")
	denied(asRole("ferry_consumer", `INSERT INTO ferry.messages (queue_id, id, visible_at, body) VALUES ($1, -1, now(), '{}')`, q.ID),
		"consumer writes ferry.messages")
	denied(asRole("ferry_consumer", `SELECT * FROM ferry.message_ack($1, '{1}', '{1}', true)`, q.ID), "consumer calls the engine")
	denied(asRole("ferry_consumer", `SELECT ferry.receipt_encode(1, 2)`), "consumer calls an internal function")
	var producerFns []string
	require.NoError(t, e.pool.QueryRow(e.ctx, `
		SELECT coalesce(array_agg(p.oid::regprocedure::text), '{}') FROM pg_proc p
		WHERE p.pronamespace = 'ferry'::regnamespace AND EXISTS (
			SELECT 1 FROM aclexplode(p.proacl) a WHERE a.grantee = 'ferry_producer'::regrole AND a.privilege_type = 'EXECUTE'
		)`).Scan(&producerFns))
	// ferry.send and the others, where the producers' sections have
	// landed (the direct INSERT above stands for them before).
	for _, fn := range producerFns {
		// Called with NULLs of its argument types: refused before it runs.
		call := regexp.MustCompile(`\((.*)\)$`).ReplaceAllStringFunc(fn, func(args string) string {
			var nulls []string
			for _, a := range strings.Split(strings.Trim(args, "()"), ",") {
				if a = strings.TrimSpace(a); a != "" {
					nulls = append(nulls, "NULL::"+a)
				}
			}
			return "(" + strings.Join(nulls, ", ") + ")"
		})
		denied(asRole("ferry_consumer", `SELECT `+call), "consumer calls "+fn)
	}
	denied(asRole("ferry_producer", `SELECT * FROM ferry.receive('roles')`), "producer receives")
	denied(asRole("ferry_producer", `SELECT * FROM ferry.ack('roles', '{}')`), "producer acks")
}

// TestPromotionWrittenOnce: the promotion of a group's next message has
// one text, ferry.message_promote, which the engine's
// functions that remove group heads call. No other function of the schema
// promotes by itself (sets waiting = false), as the first SQL API's ack,
// nack and dead letter did with copies of the store's text. (The store's
// deletes call it too: TestMessageExpire and the purge and seek tests see
// their groups promoted.)
func TestPromotionWrittenOnce(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	var promoting []string
	require.NoError(t, e.db.QueryRow(e.ctx, `
		SELECT coalesce(array_agg(proname::text ORDER BY proname), '{}') FROM pg_proc
		WHERE pronamespace = 'ferry'::regnamespace AND prosrc ~* 'waiting\s*=\s*false'`).Scan(&promoting))
	require.Equal(t, []string{"message_promote"}, promoting, "the functions that set waiting = false")
	for _, fn := range []string{"message_ack", "message_nack", "message_dead_letter"} {
		var src string
		require.NoError(t, e.db.QueryRow(e.ctx, `SELECT prosrc FROM pg_proc WHERE proname = $1 AND pronamespace = 'ferry'::regnamespace`, fn).Scan(&src))
		require.Contains(t, src, "ferry.message_promote(", "ferry.%s promotes by ferry.message_promote", fn)
	}
}
