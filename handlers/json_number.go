package handlers

// What PostgreSQL's numeric can store, which is what jsonb stores a JSON
// number as (src/backend/utils/adt/numeric.c: set_var_from_str, then
// make_result). A number is read as digits with a decimal exponent; then:
//
//   - the exponent's magnitude must be below INT_MAX/2 = 1073741823 (as
//     PostgreSQL 15 checks it), whatever the digits, zero included;
//   - the display scale, the digits written after the point less the
//     exponent (0.10e-3 has scale 5, and so has 0e-5), must fit the 14
//     bits numeric keeps it in: at most 16383, zero included;
//   - the weight, in base-10000 digits, of the first nonzero digit must fit
//     an int16: at most 131072 decimal digits before the point (the limit
//     below is implied by the scale's).
//
// Trailing zeros count toward the scale and leading zeros do not count
// toward the weight. Message bodies are stored as json (text), which would
// keep such numbers as written; the same rule holds for them anyway, so
// that a body and an event's data take the same JSON.
const (
	pgMaxExponent = 1<<30 - 1 // |exponent| must be below it
	pgMaxScale    = 16383
	pgMaxLeadExp  = 4*32767 + 3 // decimal exponent of the first nonzero digit
)

// pgNumber is a JSON number as PostgreSQL reads it.
type pgNumber struct {
	neg        bool
	intDigits  int   // digits before the point
	fracDigits int   // digits after it
	lead       int   // index of the first nonzero digit among all digits; -1: zero
	exp        int64 // the exponent, valid unless hugeExp
	hugeExp    bool  // the exponent has more than 18 significant digits
}

// scanNumber reads the JSON number at b[i:]; end is just past it, and ok
// is false when no JSON number starts there.
func scanNumber(b []byte, i int) (n pgNumber, end int, ok bool) {
	n.lead = -1
	j := i
	if j < len(b) && b[j] == '-' {
		n.neg = true
		j++
	}
	digits := func(count *int) {
		for ; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
			if n.lead < 0 && b[j] != '0' {
				n.lead = n.intDigits + n.fracDigits
			}
			*count++
		}
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
		n.intDigits = 1
	case j < len(b) && b[j] >= '1' && b[j] <= '9':
		digits(&n.intDigits)
	default:
		return n, j, false
	}
	if j < len(b) && b[j] == '.' {
		j++
		if digits(&n.fracDigits); n.fracDigits == 0 {
			return n, j, false
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		neg := false
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			neg = b[j] == '-'
			j++
		}
		start := j
		for ; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
			if n.exp > 1e17 {
				n.hugeExp = true
				continue
			}
			n.exp = n.exp*10 + int64(b[j]-'0')
		}
		if j == start {
			return n, j, false
		}
		if neg {
			n.exp = -n.exp
		}
	}
	return n, j, true
}

// scale is the display scale PostgreSQL gives the number.
func (n pgNumber) scale() int64 { return max(0, int64(n.fracDigits)-n.exp) }

// leadExp is the decimal exponent of the first nonzero digit.
func (n pgNumber) leadExp() int64 { return int64(n.intDigits-1-n.lead) + n.exp }

// fits reports whether PostgreSQL's numeric can store the number.
func (n pgNumber) fits() bool {
	if n.hugeExp || n.exp >= pgMaxExponent || n.exp <= -pgMaxExponent || n.scale() > pgMaxScale {
		return false
	}
	return n.lead < 0 || n.leadExp() <= pgMaxLeadExp
}

// written is the length of the number as PostgreSQL writes it out: 1e5 is
// 100000, 0e-3 is 0.000. Only for numbers that fit.
func (n pgNumber) written() int64 {
	l := int64(1)
	if n.lead >= 0 {
		if e := n.leadExp(); e >= 0 {
			l = e + 1
		}
		if n.neg {
			l++
		}
	}
	if s := n.scale(); s > 0 {
		l += s + 1
	}
	return l
}

// storedSize is the size a JSON value counts against the body limit: the
// length of its compact encoding, each number counted as PostgreSQL writes
// it when that is longer (1e131071 is 131072 digits on every read of an
// event). v has passed the strict pass.
func storedSize(v []byte) int64 {
	var size int64
	for i := 0; i < len(v); {
		switch c := v[i]; {
		case c == '"':
			j := i + 1
			for ; j < len(v) && v[j] != '"'; j++ {
				if v[j] == '\\' {
					j++
				}
			}
			j = min(j+1, len(v))
			size += int64(j - i)
			i = j
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '-' || (c >= '0' && c <= '9'):
			n, end, ok := scanNumber(v, i)
			if !ok || end == i {
				size++
				i++
				continue
			}
			size += max(int64(end-i), n.written())
			i = end
		default:
			size++
			i++
		}
	}
	return size
}
