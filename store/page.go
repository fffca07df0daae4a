package store

// The list functions (QueueList, TopicList, SubscriptionList, ConsumerGroupGroupList)
// page by keyset: WHERE name > $after ORDER BY name LIMIT $limit+1, read
// from a unique index on the name. A page costs the same at any position
// and however many rows there are, and rows created or deleted between two
// pages neither break the listing nor shift it: each name that exists
// throughout is listed exactly once.

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
