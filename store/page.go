package store

import "github.com/jackc/pgx/v5"

// The list functions ([QueueList], [TopicList], [SubscriptionList],
// [ConsumerGroupList]) page by keyset: WHERE name > $after ORDER BY name LIMIT $limit+1, read
// from a unique index on the name. A page costs the same at any position
// and however many rows there are, and rows created or deleted between two
// pages neither break the listing nor shift it: each name that exists
// throughout is listed exactly once.

// PageParams selects one page of a list of resources by name (queues,
// topics).
type PageParams struct {
	After string // only those named after this one ("" = from the first)
	Limit int    // at most this many; 0 = every one (internal callers only)
}

// pageLimit is the LIMIT of a page query: one row more than the page, to
// tell whether more follow; NULL (no limit) for limit 0.
func pageLimit(limit int) *int {
	if limit <= 0 {
		return nil
	}
	n := limit + 1
	return &n
}

// pageCut cuts the extra row that pageLimit asked for and reports whether
// there was one.
func pageCut[T any](rows []T, limit int) ([]T, bool) {
	if limit <= 0 || len(rows) <= limit {
		return rows, false
	}
	return rows[:limit], true
}

// pageCollect reads the rows of a page query (LIMIT pageLimit(limit)) with
// scan, then cuts the page (pageCut); err is the query's error, and op
// names the list in the errors.
func pageCollect[T any](rows pgx.Rows, err error, op string, limit int, scan pgx.RowToFunc[T]) ([]T, bool, error) {
	if err != nil {
		return nil, false, interpretError(op, err)
	}
	page, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, false, interpretError(op, err)
	}
	page, more := pageCut(page, limit)
	return page, more, nil
}
