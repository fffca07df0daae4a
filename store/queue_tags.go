package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// MaxQueueTags is how many tags a queue may have (SQS's limit).
const MaxQueueTags = 50

// QueueTagsChange adds set to the named queue's tags (replacing the values
// of keys it has) and removes the keys in remove, in one statement, so
// that concurrent changes of different keys all hold. A change that would
// leave more than [MaxQueueTags] tags writes nothing and is a
// *ValidationError of "tags". Tags are not settings: updated_at stays.
func QueueTagsChange(ctx context.Context, db TxBeginner, name string, set map[string]string, remove []string) error {
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var n int
		err := tx.QueryRow(ctx, `
			UPDATE ferry.queues q SET tags = (q.tags - $3::text[]) || $2::jsonb
			WHERE name = $1 AND topic_id IS NULL
			RETURNING (SELECT count(*) FROM jsonb_object_keys(q.tags))`,
			name, tagsOrEmpty(set), append([]string{}, remove...)).Scan(&n)
		if err != nil {
			return err
		}
		if n > MaxQueueTags {
			return &ValidationError{Field: "tags", Message: fmt.Sprintf("a queue has at most %d tags; this would make %d", MaxQueueTags, n)}
		}
		return nil
	})
	if _, ok := err.(*ValidationError); ok { //nolint:errorlint // returned as made above
		return err
	}
	return interpretError("queue tags change", err)
}
