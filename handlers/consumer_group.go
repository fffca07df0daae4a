package handlers

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/store"
)

// Bounds of consumer group settings, part of the contract (openapi.yaml).
const (
	minSessionTimeoutSeconds     = 5
	maxSessionTimeoutSeconds     = 300
	defaultSessionTimeoutSeconds = 30
	maxPollEvents                = 1000
)

type pollRequest struct {
	Consumer              *string `json:"consumer"`
	MaxEvents             *int    `json:"max_events"`
	WaitSeconds           *int    `json:"wait_seconds"`
	SessionTimeoutSeconds *int    `json:"session_timeout_seconds"`
	Start                 *string `json:"start"`
}

type pollReply struct {
	Generation int64        `json:"generation"`
	Partitions []int        `json:"partitions"`
	Events     []eventReply `json:"events"`
}

// consumerGroupRef validates the route's topic and group names.
func consumerGroupRef(c echo.Context) (topic, group string, err error) {
	if topic, err = name(c, "topic"); err != nil {
		return "", "", err
	}
	group, err = name(c, "group")
	return topic, group, err
}

// consumerName validates a consumer id: a name, as queues are named.
func consumerName(v *string) (string, error) {
	if v == nil {
		return "", invalid("consumer", "is required")
	}
	if !nameRe.MatchString(*v) {
		return "", invalid("consumer", "must match %s", nameRe)
	}
	return *v, nil
}

// member is the consumer a poll, commit or leave speaks for.
type member struct{ topic, group, consumer string }

// memberOf validates the route's topic and group, decodes req and checks
// its consumer (*consumer, once decoded): what a member's poll, commit and
// leave begin with.
func (h *handler) memberOf(c echo.Context, req any, consumer **string) (member, error) {
	var (
		m   member
		err error
	)
	if m.topic, m.group, err = consumerGroupRef(c); err != nil {
		return m, err
	}
	if err := h.decode(c, req, false); err != nil {
		return m, err
	}
	m.consumer, err = consumerName(*consumer)
	return m, err
}

func (h *handler) consumerGroupPoll(c echo.Context) error {
	var req pollRequest
	m, err := h.memberOf(c, &req, &req.Consumer)
	if err != nil {
		return err
	}
	var cs checks
	cs.intRange("max_events", req.MaxEvents, 1, maxPollEvents)
	cs.intRange("wait_seconds", req.WaitSeconds, 0, 20)
	cs.intRange("session_timeout_seconds", req.SessionTimeoutSeconds, minSessionTimeoutSeconds, maxSessionTimeoutSeconds)
	if err := cs.err(); err != nil {
		return err
	}
	session := deref(req.SessionTimeoutSeconds, defaultSessionTimeoutSeconds)
	wait := deref(req.WaitSeconds, 0)
	if wait >= session {
		// A member waiting longer than its session would be evicted while
		// it waits.
		return invalid("wait_seconds", "must be less than session_timeout_seconds (%d)", session)
	}
	var start store.StartPosition
	if req.Start != nil {
		if start, err = parseStart("start", *req.Start); err != nil {
			return err
		}
	}
	ctx := c.Request().Context()
	var (
		res    store.ConsumerGroupPollResult
		source string
	)
	err = h.withTopic(ctx, m.topic, func(t store.Topic) (bool, error) {
		source = t.CloudSource()
		res, err = store.ConsumerGroupPoll(ctx, h.Pool, h.Notifier, store.ConsumerGroupPollParams{
			Topic: t, Group: m.group, Consumer: m.consumer,
			SessionTimeout: time.Duration(session) * time.Second,
			Start:          start,
			Max:            deref(req.MaxEvents, 100),
			Wait:           time.Duration(wait) * time.Second,
			FallbackPoll:   h.FallbackPoll,
			Stop:           h.Stop,
			Recheck:        h.keyRecheck(c),
		})
		return false, err
	})
	if err != nil {
		return err
	}
	h.Metrics.ObserveGroup(m.topic, m.group, res.ConsumerGroupRefresh)
	if res.Created {
		// A group is created by its first poll; polls are not audited,
		// its creation is.
		h.auditRecord(c, string(access.Group)+":"+m.topic+"/"+m.group, "group.create", keyOf(c), http.StatusOK)
	}
	out := pollReply{Generation: res.Generation, Partitions: res.Partitions, Events: make([]eventReply, len(res.Events))}
	for i, e := range res.Events {
		out.Events[i] = h.toEventReply(c, source, e)
	}
	return replyPoll(c, out)
}

type commitRequest struct {
	Consumer   *string          `json:"consumer"`
	Generation *int64           `json:"generation"`
	Offsets    map[string]int64 `json:"offsets"`
}

// partitionOffsets validates a map of partition (as a decimal string) to
// offset against the topic's partitions.
func partitionOffsets(field string, raw map[string]int64, t store.Topic, min int64) (map[int]int64, error) {
	if raw == nil {
		return nil, invalid(field, "is required")
	}
	if len(raw) == 0 {
		return nil, invalid(field, "must name at least one partition")
	}
	out := make(map[int]int64, len(raw))
	for k, off := range raw {
		p, err := strconv.Atoi(k)
		if err != nil || strconv.Itoa(p) != k || p < 0 {
			return nil, invalid(field, "keys must be partition numbers, not %q", k)
		}
		if p >= t.Partitions {
			return nil, invalid(field+"."+k, "the topic has no partition %d (it has %d)", p, t.Partitions)
		}
		if off < min {
			return nil, invalid(field+"."+k, "must be at least %d", min)
		}
		out[p] = off
	}
	return out, nil
}

func (h *handler) consumerGroupCommit(c echo.Context) error {
	var req commitRequest
	m, err := h.memberOf(c, &req, &req.Consumer)
	if err != nil {
		return err
	}
	if req.Generation == nil {
		return invalid("generation", "is required")
	}
	if *req.Generation < 0 {
		return invalid("generation", "must not be negative")
	}
	ctx := c.Request().Context()
	// The hot path of a consumer: the topic comes from the cache, looked
	// up afresh if it does not know a partition named (it may have grown).
	err = h.withTopic(ctx, m.topic, func(t store.Topic) (bool, error) {
		offsets, err := partitionOffsets("offsets", req.Offsets, t, 0)
		if err != nil {
			return true, err
		}
		return false, store.ConsumerGroupCommit(ctx, h.Pool, store.ConsumerGroupCommitParams{
			Topic: t, Group: m.group, Consumer: m.consumer, Generation: *req.Generation, Offsets: offsets,
		})
	})
	if errors.Is(err, store.ErrFenced) {
		h.Metrics.ObserveFencedCommit(m.topic, m.group)
		return problem(http.StatusConflict, codeConflict,
			"the consumer does not own every partition named in that generation (it was rebalanced away); poll again, nothing was committed")
	}
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

type leaveRequest struct {
	Consumer *string `json:"consumer"`
}

// consumerGroupLeave removes a member at once (graceful shutdown). A consumer that
// is not a member answers 204 as well: a leave is idempotent, so a retried
// leave, or one after the session timed out, does not fail the shutdown.
func (h *handler) consumerGroupLeave(c echo.Context) error {
	var req leaveRequest
	m, err := h.memberOf(c, &req, &req.Consumer)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	var res store.ConsumerGroupLeaveResult
	err = h.withTopic(ctx, m.topic, func(t store.Topic) (bool, error) {
		res, err = store.ConsumerGroupLeave(ctx, h.Pool, h.Notifier, store.ConsumerGroupLeaveParams{Topic: t, Group: m.group, Consumer: m.consumer})
		return false, err
	})
	if err != nil {
		return err
	}
	h.Metrics.ObserveGroup(m.topic, m.group, res.ConsumerGroupRefresh)
	return c.NoContent(http.StatusNoContent)
}

type consumerGroupSeekRequest struct {
	To      *string          `json:"to"`
	Offsets map[string]int64 `json:"offsets"`
}

func (h *handler) consumerGroupSeek(c echo.Context) error {
	topic, group, err := consumerGroupRef(c)
	if err != nil {
		return err
	}
	var req consumerGroupSeekRequest
	if err := h.decode(c, &req, false); err != nil {
		return err
	}
	if (req.To == nil) == (req.Offsets == nil) {
		return invalid("to", "give either to or offsets")
	}
	ctx := c.Request().Context()
	t, err := store.TopicGet(ctx, h.Pool, topic)
	if err != nil {
		return err
	}
	p := store.ConsumerGroupSeekParams{Topic: t, Group: group}
	if req.To != nil {
		if p.Start, err = parseStart("to", *req.To); err != nil {
			return err
		}
	} else if p.Offsets, err = partitionOffsets("offsets", req.Offsets, t, 0); err != nil {
		return err
	}
	if err := store.ConsumerGroupSeek(ctx, h.Pool, p); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

type consumerGroupMemberReply struct {
	Consumer              string    `json:"consumer"`
	Partitions            []int     `json:"partitions"`
	LastSeen              time.Time `json:"last_seen"`
	SessionTimeoutSeconds int       `json:"session_timeout_seconds"`
}

type consumerGroupPartitionReply struct {
	Partition       int     `json:"partition"`
	CommittedOffset int64   `json:"committed_offset"`
	HeadOffset      int64   `json:"head_offset"`
	Lag             int64   `json:"lag"`
	Owner           *string `json:"owner"`
	ExpiredSkipped  int64   `json:"expired_skipped"`
}

type consumerGroupReply struct {
	Name       string                        `json:"name"`
	Topic      string                        `json:"topic"`
	Generation int64                         `json:"generation"`
	CreatedAt  time.Time                     `json:"created_at"`
	Members    []consumerGroupMemberReply    `json:"members"`
	Partitions []consumerGroupPartitionReply `json:"partitions"`
}

func toConsumerGroupReply(topic string, g store.ConsumerGroup) consumerGroupReply {
	out := consumerGroupReply{Name: g.Name, Topic: topic, Generation: g.Generation, CreatedAt: g.CreatedAt.UTC(),
		Members: make([]consumerGroupMemberReply, len(g.Members)), Partitions: make([]consumerGroupPartitionReply, len(g.Partitions))}
	for i, m := range g.Members {
		out.Members[i] = consumerGroupMemberReply{Consumer: m.Consumer, Partitions: m.Partitions, LastSeen: m.LastSeen.UTC(),
			SessionTimeoutSeconds: m.SessionTimeoutSeconds}
	}
	for i, p := range g.Partitions {
		out.Partitions[i] = consumerGroupPartitionReply(p)
	}
	return out
}

// consumerGroupTopic validates the route's topic and group names and
// finds the topic (not from the cache).
func (h *handler) consumerGroupTopic(c echo.Context) (store.Topic, string, error) {
	topic, group, err := consumerGroupRef(c)
	if err != nil {
		return store.Topic{}, "", err
	}
	t, err := store.TopicGet(c.Request().Context(), h.Pool, topic)
	return t, group, err
}

func (h *handler) consumerGroupGet(c echo.Context) error {
	t, group, err := h.consumerGroupTopic(c)
	if err != nil {
		return err
	}
	g, err := store.ConsumerGroupDescribe(c.Request().Context(), h.Pool, t, group)
	if err != nil {
		return err
	}
	h.Metrics.ObserveGroup(t.Name, group, g.Refresh)
	return reply(c, http.StatusOK, toConsumerGroupReply(t.Name, g))
}

// consumerGroupList answers one page of the topic's groups, each described (and
// so refreshed); only that page's groups are.
func (h *handler) consumerGroupList(c echo.Context) error {
	topic, err := name(c, "topic")
	if err != nil {
		return err
	}
	page, err := pageOf(c, "groups")
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	t, err := store.TopicGet(ctx, h.Pool, topic)
	if err != nil {
		return err
	}
	list := readable(mayRead(c, access.Group, topic), func(n string) string { return n }, func(ctx context.Context, p listPage) ([]string, bool, error) {
		return store.ConsumerGroupList(ctx, h.Pool, store.ConsumerGroupListParams{TopicID: t.ID, After: p.after, Limit: p.limit})
	})
	names, more, err := list(ctx, page)
	if err != nil {
		return err
	}
	out := make([]consumerGroupReply, 0, len(names))
	for _, n := range names {
		g, err := store.ConsumerGroupDescribe(ctx, h.Pool, t, n)
		if errors.Is(err, store.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return err
		}
		// Describing refreshed the group: count what that changed.
		h.Metrics.ObserveGroup(topic, n, g.Refresh)
		out = append(out, toConsumerGroupReply(topic, g))
	}
	var last string
	if len(names) > 0 {
		last = names[len(names)-1] // listed, even if deleted since: the next page starts after it
	}
	return reply(c, http.StatusOK, map[string]any{"groups": out, "next": page.next(more, last)})
}

func (h *handler) consumerGroupDelete(c echo.Context) error {
	t, group, err := h.consumerGroupTopic(c)
	if err != nil {
		return err
	}
	if err := store.ConsumerGroupDelete(c.Request().Context(), h.Pool, t, group); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
