package store

import "strings"

// typeMatcher matches an event type against a filter's type patterns
// word by word, all patterns at once: an automaton whose states are the
// positions in the patterns, run over the type's words with one bit per
// position. Its work is proportional to the words of the type times the
// positions of the patterns (over 64) whatever the patterns are, where a
// regular expression of the same patterns costs Go's NFA tens of
// milliseconds a type once they hold a few "#" (and PostgreSQL's engine
// more). It is what both a publish (Filter.match) and a backfill use.
//
// Positions of one pattern are its words, with a run of "#" counted once
// (it means the same as one), followed by its accepting position; the
// patterns' positions follow each other. From a position, a word moves
// on when the position is "*" or that very word, stays when it is "#";
// and a "#" may also be passed over without a word.
type typeMatcher struct {
	start  bitset            // the first position of every pattern
	accept bitset            // the last (accepting) position of every pattern
	star   bitset            // positions holding "*"
	hash   bitset            // positions holding "#"
	lit    map[string]bitset // a literal word → the positions holding it
	size   int               // words of each bitset
}

type bitset []uint64

func (b bitset) set(i int) { b[i/64] |= 1 << (i % 64) }

// newTypeMatcher compiles the patterns (each "."-separated words).
func newTypeMatcher(patterns []string) *typeMatcher {
	n := 0
	split := make([][]string, len(patterns))
	for i, p := range patterns {
		for _, w := range strings.Split(p, ".") {
			if w == "#" && len(split[i]) > 0 && split[i][len(split[i])-1] == "#" {
				continue // "#.#" is "#"
			}
			split[i] = append(split[i], w)
		}
		n += len(split[i]) + 1
	}
	size := (n + 63) / 64
	m := &typeMatcher{
		start: make(bitset, size), accept: make(bitset, size),
		star: make(bitset, size), hash: make(bitset, size),
		lit: map[string]bitset{}, size: size,
	}
	pos := 0
	for _, words := range split {
		m.start.set(pos)
		for _, w := range words {
			switch w {
			case "*":
				m.star.set(pos)
			case "#":
				m.hash.set(pos)
			default:
				b, ok := m.lit[w]
				if !ok {
					b = make(bitset, size)
					m.lit[w] = b
				}
				b.set(pos)
			}
			pos++
		}
		m.accept.set(pos)
		pos++
	}
	return m
}

// match reports whether typ matches any of the patterns.
func (m *typeMatcher) match(typ string) bool {
	cur := make(bitset, m.size)
	next := make(bitset, m.size)
	copy(cur, m.start)
	m.passHashes(cur)
	for rest := typ; ; {
		w, after, more := strings.Cut(rest, ".")
		lit := m.lit[w]
		alive := uint64(0)
		carry := uint64(0)
		for i := range cur {
			moves := cur[i] & m.star[i]
			if lit != nil {
				moves |= cur[i] & lit[i]
			}
			next[i] = moves<<1 | carry | cur[i]&m.hash[i]
			carry = moves >> 63
			alive |= next[i]
		}
		if alive == 0 {
			return false
		}
		m.passHashes(next)
		cur, next = next, cur
		if !more {
			break
		}
		rest = after
	}
	for i := range cur {
		if cur[i]&m.accept[i] != 0 {
			return true
		}
	}
	return false
}

// passHashes adds, for every "#" position in b, the position after it
// (a "#" matching no word). A run of "#" is one position, so one step
// suffices: the position after a "#" is never a "#".
func (m *typeMatcher) passHashes(b bitset) {
	carry := uint64(0)
	for i := range b {
		h := b[i] & m.hash[i]
		b[i] |= h<<1 | carry
		carry = h >> 63
	}
}
