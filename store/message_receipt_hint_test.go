package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// tokenGrouped is bit 58 of a claim token (ferry.claim_token).
const tokenGrouped = int64(1) << 58

// rowPart is the partition that holds a message's row.
func (e *env) rowPart(q store.Queue, id int64) int {
	e.t.Helper()
	var part int
	require.NoError(e.t, e.pool.QueryRow(e.ctx, `SELECT part FROM ferry.messages WHERE queue_id = $1 AND id = $2`, q.ID, id).Scan(&part))
	return part
}

// TestClaimTokensNameTheirRow: a claim token names the partition the claim
// put the row in and whether the message has a group (ferry.claim_token),
// and a receipt whose token names another partition (the row moved: the
// rotator forwarded it to COLD) or none (a token of an earlier release)
// still acks, nacks and extends. A token that says "no group" of a grouped
// message is forged: it matches no row and removes nothing.
func TestClaimTokensNameTheirRow(t *testing.T) {
	t.Parallel()
	e, q := newQueueEnv(t, "hint", store.QueuePatch{})
	e.send(q, msg(1), grouped("g", 1), grouped("g", 2))
	got := e.claim(q, 10, time.Minute)
	require.Len(t, got, 2, "the plain message and the group's head")
	var plain, head store.Message
	for _, m := range got {
		if m.Group == nil {
			plain = m
		} else {
			head = m
		}
	}
	var tokenPart int
	for _, m := range got {
		require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT ferry.token_part($1)`, m.Receipt.Token).Scan(&tokenPart))
		require.Equal(t, e.rowPart(q, m.ID), tokenPart, "the token names the row's partition")
	}
	require.Zero(t, plain.Receipt.Token&tokenGrouped, "a message without a group")
	require.NotZero(t, head.Receipt.Token&tokenGrouped, "a group's head")

	forged := head.Receipt
	forged.Token &^= tokenGrouped
	require.Equal(t, []bool{false}, e.ack(q, forged), "a token that denies the group is not the row's")
	require.Equal(t, int64(3), e.live(q))

	// The rotator's forward moves a row to COLD (16) and keeps its token.
	_, err := e.pool.Exec(e.ctx, `UPDATE ferry.messages SET part = 16 WHERE queue_id = $1 AND id = $2`, q.ID, plain.ID)
	require.NoError(t, err)
	ext, err := store.MessageExtend(e.ctx, e.pool, q.ID, []store.Receipt{plain.Receipt}, time.Hour)
	require.NoError(t, err)
	require.True(t, ext[0].OK, "an extend finds the moved row")
	require.Equal(t, []bool{true}, e.ack(q, plain.Receipt), "so does an ack")

	// A token of an earlier release: 53 random bits, no partition, no
	// group flag. Its ack takes the group lock and promotes the next.
	old := head.Receipt
	old.Token = 12345
	_, err = e.pool.Exec(e.ctx, `UPDATE ferry.messages SET claim_token = $3 WHERE queue_id = $1 AND id = $2`, q.ID, head.ID, old.Token)
	require.NoError(t, err)
	nacked, _, err := store.MessageNack(e.ctx, e.pool, store.NackParams{Queue: q, Receipts: []store.Receipt{old}, Delay: ptr(time.Duration(0))})
	require.NoError(t, err)
	require.True(t, nacked[0].OK, "a nack finds the row of an earlier release's token")
	again := e.claim(q, 10, time.Minute)
	require.Len(t, again, 1, "the head again, its group's next still waiting")
	require.Equal(t, head.ID, again[0].ID)
	_, err = e.pool.Exec(e.ctx, `UPDATE ferry.messages SET claim_token = $3 WHERE queue_id = $1 AND id = $2`, q.ID, head.ID, old.Token)
	require.NoError(t, err)
	require.Equal(t, []bool{true}, e.ack(q, old), "an ack of an earlier release's token")
	next := e.claim(q, 10, time.Minute)
	require.Len(t, next, 1, "the ack promoted the group's next message")
	require.Equal(t, "g", *next[0].Group)
	require.Equal(t, []bool{true}, e.ack(q, next[0].Receipt))
	require.Zero(t, e.live(q))
	e.requireCountersExact(q)
}
