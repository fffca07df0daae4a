package store

import (
	"encoding/json"
	"slices"
)

// fanoutSub is a subscription as a publish matches events against it.
type fanoutSub struct {
	id      int64
	filter  *Filter
	ordered bool
}

// fanout is the deliveries of one publish: parallel arrays (as the append
// statement takes them), one entry per (subscription, event), in event
// order; and the group locks they need.
type fanout struct {
	queues     []int64
	events     []int32 // 1-based position of the event among the fresh ones
	groups     []*string
	lockQueues []int64
	lockGroups []string
}

// planFanout matches every fresh event against every subscription.
func planFanout(subs []fanoutSub, fresh []publishRow, source string) fanout {
	var f fanout
	if len(subs) == 0 {
		return f
	}
	locked := map[fanoutLock]bool{}
	for i, r := range fresh {
		e := &matchEvent{typ: r.typ, rawCE: r.ce, source: source}
		if r.attrs != nil {
			e.rawAttrs = json.RawMessage(*r.attrs)
		}
		if r.data != nil {
			e.rawData = json.RawMessage(*r.data)
		}
		for _, s := range subs {
			if !s.filter.match(e) {
				continue
			}
			var grp *string
			if s.ordered && r.key != nil {
				grp = r.key
				l := fanoutLock{s.id, *grp}
				if !locked[l] {
					locked[l] = true
					f.lockQueues = append(f.lockQueues, s.id)
					f.lockGroups = append(f.lockGroups, *grp)
				}
			}
			f.queues = append(f.queues, s.id)
			f.events = append(f.events, int32(i+1))
			f.groups = append(f.groups, grp)
		}
	}
	return f
}

type fanoutLock struct {
	queue int64
	grp   string
}

// matched says, for each of the n fresh events of the batch (by
// position), whether some subscription gets it.
func (f fanout) matched(n int) []bool {
	m := make([]bool, n)
	for _, ev := range f.events {
		m[ev-1] = true
	}
	return m
}

// fed lists the subscriptions that got deliveries, once each.
func (f fanout) fed() []int64 {
	ids := slices.Clone(f.queues)
	slices.Sort(ids)
	return slices.Compact(ids)
}
