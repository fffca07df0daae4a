package store

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// assignCase is one input of assignSticky.
type assignCase struct {
	parts   []int
	current map[int]string
	members []string
}

// randomAssignCase draws 1..32 partitions, 0..10 live members (sorted, as
// consumerGroupRefresh passes them) out of 14 names, and current owners that are
// live, departed or absent, in one of several shapes.
func randomAssignCase(rng *rand.Rand) assignCase {
	c := assignCase{current: map[int]string{}}
	for p := range 1 + rng.IntN(32) {
		c.parts = append(c.parts, p)
	}
	names := make([]string, 14)
	for i := range names {
		names[i] = fmt.Sprintf("c%02d", i)
	}
	rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	c.members = slices.Clone(names[:rng.IntN(11)])
	slices.Sort(c.members)
	switch rng.IntN(5) {
	case 0: // any of the names, or nobody
		for _, p := range c.parts {
			if rng.IntN(4) > 0 {
				c.current[p] = names[rng.IntN(len(names))]
			}
		}
	case 1: // one owner holds most (a member that was alone)
		owner := names[rng.IntN(len(names))]
		for _, p := range c.parts {
			switch rng.IntN(6) {
			case 0: // nobody
			case 1:
				c.current[p] = names[rng.IntN(len(names))]
			default:
				c.current[p] = owner
			}
		}
	case 2: // a new group: nobody owns anything
	case 3: // the balanced outcome for other members (some joined, some left)
		var before []string
		for _, n := range names {
			if rng.IntN(2) == 0 {
				before = append(before, n)
			}
		}
		slices.Sort(before)
		for p, o := range assignSticky(c.parts, nil, before) {
			if o != "" {
				c.current[p] = o
			}
		}
	default: // only live members, unevenly
		if len(c.members) > 0 {
			for _, p := range c.parts {
				c.current[p] = c.members[rng.IntN(1+rng.IntN(len(c.members)))]
			}
		}
	}
	return c
}

// minMoves is the fewest partitions that must change owner for a balanced
// assignment: every partition without a live owner, plus what live owners
// hold beyond their share when the larger shares go to those that hold
// the most.
func minMoves(c assignCase) int {
	if len(c.members) == 0 {
		n := 0
		for _, p := range c.parts {
			if c.current[p] != "" {
				n++
			}
		}
		return n
	}
	held := map[string]int{}
	for _, p := range c.parts {
		held[c.current[p]]++
	}
	counts := make([]int, len(c.members))
	for i, m := range c.members {
		counts[i] = held[m]
	}
	sort.Sort(sort.Reverse(sort.IntSlice(counts)))
	base, extra := len(c.parts)/len(c.members), len(c.parts)%len(c.members)
	keep := 0
	for i, k := range counts {
		quota := base
		if i < extra {
			quota++
		}
		keep += min(k, quota)
	}
	return len(c.parts) - keep
}

// assignSticky's properties over many random cases: everything is
// assigned (to nobody only when there are no members), evenly (counts
// differ by at most one), stickily (an owner within its share keeps all it
// held; one that loses partitions is left with exactly its share, all of
// them its own), with the fewest moves possible, deterministically, and a
// balanced assignment is a fixed point.
func TestAssignStickyProperties(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for i := range 3000 {
		c := randomAssignCase(rng)
		desc := fmt.Sprintf("case %d (seed %d): parts %d, members %v, current %v", i, seed, len(c.parts), c.members, c.current)
		partsBefore, membersBefore, currentBefore := slices.Clone(c.parts), slices.Clone(c.members), maps.Clone(c.current)

		got := assignSticky(c.parts, c.current, c.members)
		require.Equal(t, partsBefore, c.parts, "inputs unchanged: %s", desc)
		require.Equal(t, membersBefore, c.members, "inputs unchanged: %s", desc)
		require.Equal(t, currentBefore, c.current, "inputs unchanged: %s", desc)

		// Every partition, and only those, gets an owner: a member, or
		// nobody when there are none.
		require.Len(t, got, len(c.parts), desc)
		live := map[string]bool{}
		for _, m := range c.members {
			live[m] = true
		}
		for _, p := range c.parts {
			o, ok := got[p]
			require.True(t, ok, "partition %d unassigned: %s", p, desc)
			if len(c.members) == 0 {
				require.Equal(t, "", o, "no members, no owner: %s", desc)
			} else {
				require.True(t, live[o], "partition %d given to %q, not a member: %s", p, o, desc)
			}
		}

		// Counts differ by at most one.
		if len(c.members) > 0 {
			count := map[string]int{}
			for _, o := range got {
				count[o]++
			}
			lo, hi := len(c.parts), 0
			for _, m := range c.members {
				lo, hi = min(lo, count[m]), max(hi, count[m])
			}
			require.LessOrEqual(t, hi-lo, 1, "uneven %v: %s", count, desc)
			base := len(c.parts) / len(c.members)

			// Sticky: a live owner within its share keeps everything; one
			// that gave partitions up ends with exactly its share (base or
			// base+1), all of it partitions it already held.
			held, kept := map[string]int{}, map[string]int{}
			for _, p := range c.parts {
				if o := c.current[p]; live[o] {
					held[o]++
					if got[p] == o {
						kept[o]++
					}
				}
			}
			for _, m := range c.members {
				if held[m] <= base {
					require.Equal(t, held[m], kept[m], "%s held %d (share %d) and lost some: %s", m, held[m], base, desc)
				}
				if kept[m] < held[m] {
					require.Equal(t, kept[m], count[m], "%s gave partitions up yet got others: %s", m, desc)
					require.Contains(t, []int{base, base + 1}, kept[m], "%s was cut below its share: %s", m, desc)
				}
			}
		}

		// Minimal movement.
		moved := 0
		for _, p := range c.parts {
			if got[p] != c.current[p] {
				moved++
			}
		}
		require.Equal(t, minMoves(c), moved, "moves: %s -> %v", desc, got)

		// Deterministic: the same input, in maps built in other orders,
		// gives the same output.
		for range 3 {
			again := map[int]string{}
			keys := slices.Collect(maps.Keys(c.current))
			rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
			for _, k := range keys {
				again[k] = c.current[k]
			}
			require.Equal(t, got, assignSticky(slices.Clone(c.parts), again, slices.Clone(c.members)), "not deterministic: %s", desc)
		}

		// A fixed point: assigning again with the same members moves
		// nothing.
		require.Equal(t, got, assignSticky(c.parts, got, c.members), "not a fixed point: %s", desc)
	}
}

// A few cases spelled out: the larger shares go to those that hold more,
// partitions of departed members go to the members with room, lowest
// partition first and members in order.
func TestAssignStickyExamples(t *testing.T) {
	t.Parallel()
	parts := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	cases := []struct {
		name    string
		parts   []int
		current map[int]string
		members []string
		want    map[int]string
	}{
		{"NoMembers", parts(3), map[int]string{0: "a", 2: "gone"}, nil,
			map[int]string{0: "", 1: "", 2: ""}},
		{"NewGroup", parts(5), nil, []string{"a", "b"},
			map[int]string{0: "a", 1: "a", 2: "a", 3: "b", 4: "b"}},
		{"SecondMemberJoins", parts(4), map[int]string{0: "a", 1: "a", 2: "a", 3: "a"}, []string{"a", "b"},
			map[int]string{0: "a", 1: "a", 2: "b", 3: "b"}},
		{"MemberLeaves", parts(4), map[int]string{0: "a", 1: "a", 2: "b", 3: "b"}, []string{"b"},
			map[int]string{0: "b", 1: "b", 2: "b", 3: "b"}},
		{"LargerShareToTheBiggerHolder", parts(5), map[int]string{0: "b", 1: "b", 2: "b", 3: "a", 4: "gone"}, []string{"a", "b"},
			map[int]string{0: "b", 1: "b", 2: "b", 3: "a", 4: "a"}},
		{"MorePartitionsThanMembersCanShare", parts(2), map[int]string{0: "c", 1: "c"}, []string{"a", "b", "c"},
			map[int]string{0: "c", 1: "a"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, assignSticky(tc.parts, tc.current, tc.members))
		})
	}
}
