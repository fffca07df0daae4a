package client

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// DeadLetter is a message moved to the dead letters.
type DeadLetter struct {
	ID             string            `json:"id"`
	Body           json.RawMessage   `json:"body"`
	Attributes     map[string]string `json:"attributes"`
	Group          *string           `json:"group"`
	DedupID        *string           `json:"dedup_id"`
	ReceiveCount   int               `json:"receive_count"`
	LastError      *string           `json:"last_error"`
	SentAt         time.Time         `json:"sent_at"`
	DeadLetteredAt time.Time         `json:"dead_lettered_at"`
}

// DeadLetterPage is one page of a queue's dead letters in send order; Next
// is nil on the last page.
type DeadLetterPage struct {
	Messages []DeadLetter `json:"messages"`
	Next     *string      `json:"next"`
}

// Items is the page's dead letters and the cursor of the next page.
func (l *DeadLetterPage) Items() ([]DeadLetter, *string) { return l.Messages, l.Next }

// Redrive names the dead letters to move back: exactly one of IDs and Limit
// (the oldest Limit).
type Redrive struct {
	IDs   []string `json:"ids,omitempty"`
	Limit int      `json:"limit,omitempty"`
}

// ListDeadLetters returns one page of the queue's dead letters.
func (c *Client) ListDeadLetters(ctx context.Context, queue string, p Page) (*DeadLetterPage, error) {
	out := &DeadLetterPage{}
	if err := c.listDeadLetters(ctx, queuePath(queue), p, out); err != nil {
		return nil, err
	}
	return out, nil
}

// RedriveDeadLetters moves dead letters back to the queue and returns how
// many moved. A redrive by IDs is retried like an idempotent call; one by
// Limit is not (a repeat would move more).
func (c *Client) RedriveDeadLetters(ctx context.Context, queue string, r Redrive) (int64, error) {
	return c.redrive(ctx, queuePath(queue), r)
}

// PurgeDeadLetters deletes every dead letter of the queue.
func (c *Client) PurgeDeadLetters(ctx context.Context, queue string) error {
	return c.purgeDeadLetters(ctx, queuePath(queue))
}

func (c *Client) listDeadLetters(ctx context.Context, base string, p Page, out any) error {
	return c.do(ctx, call{method: http.MethodGet, path: base + "/dead-letters", query: p.query(), idempotent: true}, out)
}

func (c *Client) redrive(ctx context.Context, base string, r Redrive) (int64, error) {
	var out struct {
		Redriven int64 `json:"redriven"`
	}
	cl := call{method: http.MethodPost, path: base + "/dead-letters/redrive", body: r, idempotent: len(r.IDs) > 0}
	err := c.do(ctx, cl, &out)
	return out.Redriven, err
}

func (c *Client) purgeDeadLetters(ctx context.Context, base string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: base + "/dead-letters", idempotent: true}, nil)
}
