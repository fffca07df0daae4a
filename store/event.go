package store

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// NewEventID makes an id for an event published without one.
func NewEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "evt_" + hex.EncodeToString(b[:])
}

// Event is an event as readers see it.
type Event struct {
	ID         string
	Type       string
	Key        *string
	Data       json.RawMessage // nil when the event had none
	Attributes json.RawMessage // nil when none
	// CE holds the CloudEvents attributes of an event published as a
	// CloudEvent; nil for one published as plain JSON (see
	// [DefaultCloudAttrs]).
	CE          *CloudAttrs
	Partition   int
	Offset      int64
	PublishedAt time.Time
}

// TopicWakeKey is the [Notifier] key of a topic: topics share the notifier
// with queues, whose keys are their (positive) ids.
func TopicWakeKey(topicID int64) int64 { return -topicID }

// scanEvent reads the columns id, type, key, data, attributes, ce,
// partition, offset, published_at.
func scanEvent(row pgx.CollectableRow) (Event, error) {
	var (
		e               Event
		data, attrs, ce *string
	)
	err := row.Scan(&e.ID, &e.Type, &e.Key, &data, &attrs, &ce, &e.Partition, &e.Offset, &e.PublishedAt)
	if err == nil && ce != nil {
		e.CE = new(CloudAttrs)
		err = json.Unmarshal([]byte(*ce), e.CE)
	}
	if data != nil {
		e.Data = []byte(*data)
	}
	if attrs != nil {
		e.Attributes = []byte(*attrs)
	}
	return e, err
}

// PendingOffset is the offset of an event id claimed by the SQL API
// (ferry.publish) in a transaction that has committed, whose event the
// relay has not appended yet. A publish that finds such a claim answers a
// duplicate at this offset; [EventAwaitAppended] waits for the real one.
const PendingOffset int64 = -2

const pendingOffsetSQL = "-2"

// publishRow is the first event of an id, as the publish writes it.
type publishRow struct {
	at          int // its position in the events given
	id, typ     string
	key         *string
	data, attrs *string // JSON text, or nil
	ce          *string // JSON text of CloudAttrs, or nil
	partition   int32
}
