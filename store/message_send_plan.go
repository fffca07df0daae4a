package store

import (
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// sendPlan is one queue's share of a send transaction: the statements
// that write its messages, added to a shared batch, each with the reader
// of its own result, and the results they read.
type sendPlan struct {
	q    Queue
	msgs []SendMessage
	// repeatOf[i] is the index of the first message of msgs with the same
	// dedup id, or -1.
	repeatOf []int
	// sent lists the indexes of msgs that are written (not repeats).
	sent    []int
	results []SendResult
	// inserted is how many rows the INSERT returned: none for messages
	// sent means the queue no longer exists.
	inserted int
}

// planSend validates msgs against the queue's configuration and prepares
// their write. Within msgs, a repeated dedup id becomes a duplicate of its
// first occurrence without reaching the database.
func planSend(q Queue, msgs []SendMessage) (*sendPlan, error) {
	retention := time.Duration(q.RetentionSeconds) * time.Second
	p := &sendPlan{q: q, msgs: msgs, repeatOf: make([]int, len(msgs)), results: make([]SendResult, len(msgs))}
	firstOf := map[string]int{}
	for i, m := range msgs {
		p.repeatOf[i] = -1
		switch {
		case m.DeliverAt != nil && time.Until(*m.DeliverAt) >= retention:
			return nil, &ValidationError{Field: fmt.Sprintf("messages[%d].deliver_at", i), Message: "is beyond the queue's retention"}
		case m.Delay != nil && *m.Delay >= retention:
			return nil, &ValidationError{Field: fmt.Sprintf("messages[%d].delay_seconds", i), Message: "is beyond the queue's retention"}
		}
		if m.DedupID != "" {
			if j, ok := firstOf[m.DedupID]; ok {
				p.repeatOf[i] = j
				continue
			}
			firstOf[m.DedupID] = i
		}
		p.sent = append(p.sent, i)
	}
	return p, nil
}

// sendColumns are the messages a plan writes as the INSERT's array
// parameters, one element per message.
type sendColumns struct {
	bodies   []string
	attrs    []*string
	groups   []*string
	dedups   []*string
	delaysMs []int64
	at       []*time.Time
}

// columns lays the written messages out as the INSERT's parameters. A
// message with neither delay nor deliver_at gets the queue's default delay.
func (p *sendPlan) columns() sendColumns {
	n := len(p.sent)
	c := sendColumns{
		bodies: make([]string, n), attrs: make([]*string, n), groups: make([]*string, n),
		dedups: make([]*string, n), delaysMs: make([]int64, n), at: make([]*time.Time, n),
	}
	for k, i := range p.sent {
		m := p.msgs[i]
		c.bodies[k] = string(m.Body)
		if len(m.Attributes) > 0 {
			s := string(m.Attributes)
			c.attrs[k] = &s
		}
		if m.Group != "" {
			g := m.Group
			c.groups[k] = &g
		}
		if m.DedupID != "" {
			d := m.DedupID
			c.dedups[k] = &d
		}
		switch {
		case m.DeliverAt != nil:
			t := *m.DeliverAt
			c.at[k] = &t
		case m.Delay != nil:
			c.delaysMs[k] = m.Delay.Milliseconds()
		default:
			c.delaysMs[k] = int64(p.q.DelaySeconds) * 1000
		}
	}
	return c
}

// addStatements adds the plan's statements to b: the queue lock (shared),
// and one call of the write that the SQL API's ferry.send runs too
// (store/definitions/message_send.sql): ferry.message_send_plain for
// messages with no group and no dedup id, else ferry.message_send_grouped,
// which takes the group locks (exclusive, in key order) and claims the
// dedup ids, followed by the read of the dedup answers
// (ferry.message_send_dedup_answer). Each statement that returns results
// carries its reader, so nothing counts positions in the batch. The write
// writes nothing if the queue no longer exists (see finish). One statement
// text for both faces (package doc, # Plans).
func (p *sendPlan) addStatements(b *pgx.Batch) {
	c := p.columns()
	b.Queue(`/* ferry:message_send_queue_lock */ SELECT pg_advisory_xact_lock_shared(ferry.queue_lock_key($1))`, p.q.ID)
	if p.simple() {
		b.Queue(`/* ferry:message_send_call */ SELECT id FROM ferry.message_send_plain($1, $2, $3, $4, $5) AS id`,
			p.q.ID, c.bodies, c.attrs, c.delaysMs, c.at).Query(p.readPlain)
		return
	}
	b.Queue(`/* ferry:message_send_grouped_call */ SELECT ord, id, inserted FROM ferry.message_send_grouped($1, $2, $3, $4, $5, $6, $7, $8)`,
		p.q.ID, c.bodies, c.attrs, c.groups, c.dedups, c.delaysMs, c.at, p.q.DedupWindowSeconds).Query(p.readGrouped)
	if dedups := p.dedupIDs(); dedups != nil {
		// In the same transaction, after the INSERT: see the function.
		b.Queue(`/* ferry:dedup_answer_call */ SELECT dedup_id, message_id FROM ferry.message_send_dedup_answer($1, $2)`,
			p.q.ID, dedups).Query(p.readDedupAnswers)
	}
}

// dedupIDs lists the dedup ids of the messages written, or nil.
func (p *sendPlan) dedupIDs() []string {
	var ids []string
	for _, i := range p.sent {
		if d := p.msgs[i].DedupID; d != "" {
			ids = append(ids, d)
		}
	}
	return ids
}

// simple reports whether no message has a group or a dedup id.
func (p *sendPlan) simple() bool {
	for _, i := range p.sent {
		if p.msgs[i].Group != "" || p.msgs[i].DedupID != "" {
			return false
		}
	}
	return true
}

// readPlain reads the ids the plain INSERT returned.
func (p *sendPlan) readPlain(rows pgx.Rows) error {
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return err
	}
	p.inserted = len(ids)
	if len(ids) == 0 {
		return nil // the queue is gone: finish says so
	}
	if len(ids) != len(p.sent) {
		return fmt.Errorf("message send: %d ids for %d messages", len(ids), len(p.sent))
	}
	slices.Sort(ids)
	for k, i := range p.sent {
		p.results[i] = SendResult{ID: ids[k]}
	}
	return nil
}

// readGrouped reads the grouped INSERT's answer: per message written, its
// id and whether it was inserted (not a duplicate of a live dedup id).
func (p *sendPlan) readGrouped(rows pgx.Rows) error {
	for rows.Next() {
		var (
			ord      int
			id       int64
			inserted bool
		)
		if err := rows.Scan(&ord, &id, &inserted); err != nil {
			return err
		}
		p.inserted++
		p.results[p.sent[ord-1]] = SendResult{ID: id, Duplicate: !inserted}
	}
	return rows.Err()
}

// readDedupAnswers answers the duplicates readGrouped found with the id of
// the message that holds their dedup id.
func (p *sendPlan) readDedupAnswers(rows pgx.Rows) error {
	first := map[string]int64{}
	for rows.Next() {
		var (
			d  string
			id int64
		)
		if err := rows.Scan(&d, &id); err != nil {
			return err
		}
		first[d] = id
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, i := range p.sent {
		if p.results[i].Duplicate {
			p.results[i].ID = first[p.msgs[i].DedupID]
		}
	}
	return nil
}

// finish completes the results once the batch was read: the repeats of a
// dedup id within msgs are duplicates of its first message. It reports
// false if the queue no longer exists (the INSERT wrote nothing).
func (p *sendPlan) finish() bool {
	if p.inserted == 0 && len(p.sent) > 0 {
		return false
	}
	for i, j := range p.repeatOf {
		if j >= 0 {
			p.results[i] = SendResult{ID: p.results[j].ID, Duplicate: true}
		}
	}
	return true
}
