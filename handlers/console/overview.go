package console

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/store"
)

// overviewPage is how many queues and topics a page of the overview lists.
const overviewPage = 50

// queueRow is a queue of the overview, with its stats.
type queueRow struct {
	Name    string
	Stats   store.QueueStats
	Problem bool
}

// overview lists what needs attention first (dead letters, disabled push,
// old messages, high or growing lag), then the queues and topics the key may read, a page at a time, found by
// part of their name.
func (c *Console) overview(ec echo.Context, v viewer) error {
	ctx := ec.Request().Context()
	part := trimmed(ec.QueryParam("q"), 128)
	trouble, err := c.trouble(ctx, v.key)
	if err != nil {
		return c.storeFailed(ec, v, err)
	}
	queues, qnext, err := c.queuePage(ctx, v.key, part, trimmed(ec.QueryParam("after"), 256))
	if err != nil {
		return c.storeFailed(ec, v, err)
	}
	topics, tnext, err := searchReadable(ctx, v.key, access.Topic, part, trimmed(ec.QueryParam("tafter"), 256),
		func(ctx context.Context, p store.NameSearchParams) ([]store.Topic, bool, error) {
			return store.TopicSearch(ctx, c.pool, p)
		},
		func(t store.Topic) string { return t.Name })
	if err != nil {
		return c.storeFailed(ec, v, err)
	}
	rows, err := c.topicRows(ctx, v.key, topics)
	if err != nil {
		return c.storeFailed(ec, v, err)
	}
	return c.render(ec, http.StatusOK, "overview", &v, "Overview", map[string]any{
		"Q": part, "Trouble": trouble, "Queues": queues, "QueuesNext": qnext, "Topics": rows, "TopicsNext": tnext,
	})
}

// storeFailed answers a failed store read.
func (c *Console) storeFailed(ec echo.Context, v viewer, err error) error {
	c.log.Error("console: store read failed", "error", err)
	return c.failAs(ec, v, http.StatusServiceUnavailable, "The database did not answer; try again.")
}

// attention is a row of the overview's attention list: what needs it,
// where its page is, and why it is listed.
type attention struct {
	Name, Kind, UI string
	Reasons        []string
}

// trouble is what needs attention among what the key may read: queues
// and subscriptions with disabled push, dead letters or an old oldest
// message, then groups with a high or growing lag (thresholds in
// store.Trouble*; each row says which it crossed).
func (c *Console) trouble(ctx context.Context, key access.Key) ([]attention, error) {
	all, err := store.TroubleList(ctx, c.pool, 200)
	if err != nil {
		return nil, err
	}
	groups, err := store.GroupTroubleList(ctx, c.pool, 200)
	if err != nil {
		return nil, err
	}
	out := []attention{}
	for _, t := range all {
		a := attention{Name: t.Name, Kind: "queue", UI: "/ui/queues/" + pathEscape(t.Name)}
		ok := key.Allows(access.Queue, t.Name, access.Read)
		if t.Topic != "" {
			a = attention{Name: t.Topic + "/" + t.Name, Kind: "subscription", UI: "/ui/topics/" + pathEscape(t.Topic) + "/subscriptions/" + pathEscape(t.Name)}
			ok = key.Allows(access.Subscription, t.Topic+"/"+t.Name, access.Read)
		}
		if !ok || len(out) == attentionRows {
			continue
		}
		if t.PushDisabled {
			a.Reasons = append(a.Reasons, "push disabled")
		}
		if t.DeadLetters > 0 {
			a.Reasons = append(a.Reasons, fmt.Sprintf("%d dead letter%s", t.DeadLetters, map[bool]string{true: "s"}[t.DeadLetters != 1]))
		}
		if t.OldestAgeSeconds > int64(store.TroubleOldAge/time.Second) {
			a.Reasons = append(a.Reasons, fmt.Sprintf("oldest message %s old (over %s)", ago(t.OldestAgeSeconds), ago(int64(store.TroubleOldAge/time.Second))))
		}
		out = append(out, a)
	}
	for _, g := range groups {
		if !key.Allows(access.Group, g.Topic+"/"+g.Group, access.Read) || len(out) == 2*attentionRows {
			continue
		}
		a := attention{Name: g.Topic + "/" + g.Group, Kind: "group", UI: "/ui/topics/" + pathEscape(g.Topic) + "/groups/" + pathEscape(g.Group)}
		if g.Lag >= store.TroubleLag {
			a.Reasons = append(a.Reasons, fmt.Sprintf("lag %d (%d or more)", g.Lag, store.TroubleLag))
		}
		if g.Growth >= store.TroubleLagGrowth {
			a.Reasons = append(a.Reasons, fmt.Sprintf("lag up %d since %s (%d or more in %s)", g.Growth, g.Since.UTC().Format("15:04 UTC"),
				store.TroubleLagGrowth, ago(int64(store.TroubleLagWindow/time.Second))))
		}
		out = append(out, a)
	}
	return out, nil
}

// attentionRows is how many queues and subscriptions, and how many
// groups, the attention list shows at most.
const attentionRows = 20

// ago writes a number of seconds in its largest units: 2h5m, 1h, 15m, 40s.
func ago(seconds int64) string {
	h, m := seconds/3600, seconds%3600/60
	switch {
	case h > 0 && m > 0:
		return fmt.Sprintf("%dh%dm", h, m)
	case h > 0:
		return fmt.Sprintf("%dh", h)
	case m > 0:
		return fmt.Sprintf("%dm", m)
	default:
		return fmt.Sprintf("%ds", seconds)
	}
}

// topicRow is a topic of the overview, with the subscriptions (and their
// stats) and groups (and their lag) of it that the key may read.
type topicRow struct {
	Name       string
	Partitions int
	Subs       []queueRow
	Groups     []store.TopicChild
}

// topicRows adds to a page of topics their readable subscriptions and
// groups: one read of them all, one of the subscriptions' stats.
func (c *Console) topicRows(ctx context.Context, key access.Key, topics []store.Topic) ([]topicRow, error) {
	ids := make([]int64, len(topics))
	rows := make([]topicRow, len(topics))
	byID := map[int64]*topicRow{}
	for i, t := range topics {
		ids[i], rows[i] = t.ID, topicRow{Name: t.Name, Partitions: t.Partitions}
		byID[t.ID] = &rows[i]
	}
	subs, groups, err := store.TopicChildList(ctx, c.pool, ids)
	if err != nil {
		return nil, err
	}
	var subIDs []int64
	for _, s := range subs {
		subIDs = append(subIDs, s.QueueID)
	}
	stats, err := store.QueueStatsGet(ctx, c.pool, subIDs)
	if err != nil {
		return nil, err
	}
	for _, s := range subs {
		r := byID[s.TopicID]
		if key.Allows(access.Subscription, r.Name+"/"+s.Name, access.Read) {
			st := stats[s.QueueID]
			r.Subs = append(r.Subs, queueRow{Name: s.Name, Stats: st, Problem: st.DeadLetters > 0 || st.OldestAgeSeconds > 3600})
		}
	}
	for _, g := range groups {
		if r := byID[g.TopicID]; key.Allows(access.Group, r.Name+"/"+g.Name, access.Read) {
			r.Groups = append(r.Groups, g)
		}
	}
	return rows, nil
}

// queuePage is a page of the queues the key may read, with their stats.
func (c *Console) queuePage(ctx context.Context, key access.Key, part, after string) ([]queueRow, string, error) {
	qs, next, err := searchReadable(ctx, key, access.Queue, part, after,
		func(ctx context.Context, p store.NameSearchParams) ([]store.Queue, bool, error) {
			return store.QueueSearch(ctx, c.pool, p)
		},
		func(q store.Queue) string { return q.Name })
	if err != nil || len(qs) == 0 {
		return nil, next, err
	}
	ids := make([]int64, len(qs))
	for i, q := range qs {
		ids[i] = q.ID
	}
	stats, err := store.QueueStatsGet(ctx, c.pool, ids)
	if err != nil {
		return nil, "", err
	}
	rows := make([]queueRow, len(qs))
	for i, q := range qs {
		s := stats[q.ID]
		rows[i] = queueRow{Name: q.Name, Stats: s, Problem: s.DeadLetters > 0 || s.OldestAgeSeconds > 3600}
	}
	return rows, next, nil
}

// searchReadable returns a page of overviewPage resources of kind whose
// names contain part, after the name after, that the key may read (as
// REST's lists filter), and the name to continue after ("" at the end).
// It reads on in large chunks until the page is full.
func searchReadable[T any](ctx context.Context, key access.Key, kind access.Kind, part, after string,
	search func(context.Context, store.NameSearchParams) ([]T, bool, error), name func(T) string) ([]T, string, error) {
	out := []T{}
	p := store.NameSearchParams{Part: part, After: after, Limit: 1000}
	for {
		xs, more, err := search(ctx, p)
		if err != nil {
			return nil, "", err
		}
		for _, x := range xs {
			if !key.Allows(kind, name(x), access.Read) {
				continue
			}
			if len(out) == overviewPage {
				return out, name(out[len(out)-1]), nil
			}
			out = append(out, x)
		}
		if !more || len(xs) == 0 {
			return out, "", nil
		}
		p.After = name(xs[len(xs)-1])
	}
}
