package store

import (
	"hash/fnv"
	"math/rand/v2"
	"sync"
)

// Spreader hands out partitions to keyless events round-robin, per
// topic: the n-th keyless event published through it to a topic goes to
// partition n mod partitions. It is safe for concurrent use, and its zero
// value is ready. A [Publisher] owns one; a caller of [EventPublishTx] that
// publishes keyless events often may keep one too (see
// PublishParams.Spreader).
//
// It keeps one counter per topic published to, and forgets them all
// when it has maxSpreadTopics: spreading then starts again from
// partition 1 of each topic, which keeps it even.
type Spreader struct {
	mu   sync.Mutex
	next map[int64]uint64 // topic id → keyless events handed out
}

// maxSpreadTopics bounds the topics a Spreader remembers.
const maxSpreadTopics = 1 << 16

// take hands out n partitions of the topic: the counters first..first+n-1
// (a partition is its counter mod the partitions). A nil Spreader starts
// at a random one.
func (s *Spreader) take(topicID int64, n int) (first uint64) {
	if s == nil {
		return rand.Uint64()
	}
	if n == 0 {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.next[topicID]
	if s.next == nil || (!ok && len(s.next) >= maxSpreadTopics) {
		s.next = map[int64]uint64{}
	}
	s.next[topicID] = c + uint64(n)
	return c + 1
}

// PartitionForKey is the partition of a keyed event: the FNV-1a 32-bit
// hash of the key's UTF-8 bytes, as an unsigned integer, modulo the
// partitions. Growing a topic's partitions remaps keys.
func PartitionForKey(key string, partitions int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(partitions))
}

// partitionNextSQL is the next offset of the partition whose row of
// ferry.topic_partitions is named p in a statement: one past its newest
// event, or p.next_offset when that is higher. A publish does not update
// the row (behind a held snapshot every update leaves a version that each
// later lock and read of the row walks, package doc # Held snapshots);
// next_offset is a floor that retention raises past what it deletes, so
// a partition whose events all expired goes on from where it was. One
// backward probe of the events' primary key.
func partitionNextSQL(p string) string {
	return `greatest(` + p + `.next_offset, coalesce((SELECT pn."offset" + 1 FROM ferry.events pn
		WHERE pn.topic_id = ` + p + `.topic_id AND pn.partition = ` + p + `.partition ORDER BY pn."offset" DESC LIMIT 1), 0))`
}
